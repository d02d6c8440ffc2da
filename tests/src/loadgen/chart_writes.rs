//! Charts of issue 10's writes A/B, journal on beside journal off: origin requests per warm
//! edge lookup, bytes from the origin per write, and freshness lag, each against its target.
//!
//! Drawn from the `writes` object of a results.json (`serde_json::Value`), not from the typed
//! report, so a committed run's charts can be drawn again without running it:
//! `bloomgate-loadgen charts --from docs/bench/writes-w25-quiet/results.json`.

use super::chart::{bars, load_font, Bars};
use serde_json::Value;
use std::path::{Path, PathBuf};

const SIDES: [&str; 2] = ["journal", "no-journal"];

/// One figure of a run (an element of `writes.runs`).
type Figure<'a> = &'a dyn Fn(&Value) -> Option<f64>;

/// The median over the rounds of each side of one figure of a run (`None`: no run had it).
fn by_side(writes: &Value, figure: Figure<'_>) -> Vec<Option<f64>> {
    let runs = writes["runs"].as_array().cloned().unwrap_or_default();
    SIDES
        .iter()
        .map(|side| {
            let mut v: Vec<f64> = runs.iter().filter(|r| r["side"] == *side).filter_map(figure).collect();
            v.sort_by(f64::total_cmp);
            (!v.is_empty()).then(|| v[v.len() / 2])
        })
        .collect()
}

/// One group per figure name, one series per side: `series[side][figure]`.
fn grouped(writes: &Value, figures: &[(&str, Figure<'_>)]) -> (Vec<String>, [Vec<Option<f64>>; 2]) {
    let names = figures.iter().map(|(n, _)| (*n).to_owned()).collect();
    let mut on = Vec::new();
    let mut off = Vec::new();
    for (_, f) in figures {
        let v = by_side(writes, *f);
        on.push(v[0]);
        off.push(v[1]);
    }
    (names, [on, off])
}

/// Draws the three charts into `dir`; the files written.
pub fn draw_writes(writes: &Value, dir: &Path, font: Option<&Path>) -> Result<Vec<PathBuf>, String> {
    load_font(font)?;
    let err = |e: Box<dyn std::error::Error>| e.to_string();
    let setting = |name: &str| writes["settings"][name].as_str().unwrap_or("?").to_owned();
    let rate = format!("{} writes/s, {} lookups/s at the edge", setting("write_rate"), setting("lookup_rate"));
    let per_lookup =
        |kind: &'static str| move |r: &Value| r["front"]["requests_per_1k_lookups"][kind].as_f64().map(|v| v / 1000.0);
    let per_write = |kind: &'static str| move |r: &Value| r["front"]["bytes_per_write"][kind].as_f64();
    let front = |field: &'static str| move |r: &Value| r["front"][field].as_f64();
    let mut written = Vec::new();

    let (names, [on, off]) = grouped(
        writes,
        &[
            ("forwarded lookups", &per_lookup("forwarded")),
            ("journal requests", &per_lookup("journal")),
            ("manifests", &per_lookup("manifest")),
            ("segments", &per_lookup("segment")),
            ("all", &per_lookup("total")),
        ],
    );
    let title = format!("Origin requests per warm edge lookup ({rate})");
    let p = dir.join("writes_requests_per_lookup.png");
    bars(
        &p,
        &Bars {
            title: &title,
            y_desc: "requests per lookup",
            names,
            series: vec![("journal on", on), ("journal off", off)],
            reference: Some((0.21, "0.21 target (journal on)".into())),
            log_y: false,
            value_fmt: |v| format!("{v:.4}"),
        },
    )
    .map_err(err)?;
    written.push(p);

    let (names, [on, off]) = grouped(
        writes,
        &[
            ("manifests", &per_write("manifest")),
            ("segments", &per_write("segment")),
            ("journal", &per_write("journal")),
            ("to stay fresh (all three)", &per_write("freshness")),
        ],
    );
    // A log scale cannot show zero: a zero bar is left out (the table has it).
    let nonzero = |v: Vec<Option<f64>>| v.into_iter().map(|x| x.filter(|x| *x > 0.0)).collect();
    let title = format!("Bytes from the origin to the edge per write, log scale ({rate})");
    let p = dir.join("writes_bytes_per_write.png");
    bars(
        &p,
        &Bars {
            title: &title,
            y_desc: "bytes per write",
            names,
            series: vec![("journal on", nonzero(on)), ("journal off", nonzero(off))],
            reference: Some((64.0, "64 B target (journal on)".into())),
            log_y: true,
            value_fmt: |v| format!("{v:.0}"),
        },
    )
    .map_err(err)?;
    written.push(p);

    let (names, [on, off]) =
        grouped(writes, &[("p50", &front("lag_p50_ms")), ("p99", &front("lag_p99_ms")), ("max", &front("lag_max_ms"))]);
    let title = format!("Freshness lag: acknowledged to \"seen\" at the edge, ms ({rate})");
    let p = dir.join("writes_freshness_lag.png");
    bars(
        &p,
        &Bars {
            title: &title,
            y_desc: "ms",
            names,
            series: vec![("journal on", on), ("journal off", off)],
            reference: Some((2000.0, "2 s target (p99)".into())),
            log_y: false,
            value_fmt: |v| format!("{v:.0}"),
        },
    )
    .map_err(err)?;
    written.push(p);
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_are_medians_by_side() {
        let writes = serde_json::json!({ "runs": [
            { "side": "journal", "front": { "lag_p99_ms": 10.0 } },
            { "side": "journal", "front": { "lag_p99_ms": 30.0 } },
            { "side": "journal", "front": { "lag_p99_ms": 20.0 } },
            { "side": "no-journal", "front": {} },
        ]});
        let lag = |r: &Value| r["front"]["lag_p99_ms"].as_f64();
        assert_eq!(by_side(&writes, &lag), vec![Some(20.0), None]);
    }
}
