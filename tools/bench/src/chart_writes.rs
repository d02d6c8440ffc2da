//! Charts of the writes A/B, journal on beside journal off: origin requests per warm
//! edge lookup, bytes from the origin per write, and freshness lag, each against its target.
//!
//! Drawn from the `writes` object of a results.json (`serde_json::Value`), not from the typed
//! report, so a committed run's charts can be drawn again without running it:
//! `bloomgate-loadgen charts --from docs/bench/writes-w25-quiet/results.json`.

use crate::chart::{bars, load_font, Bars};
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

/// Group names, and one series per side (journal on, off) with a value per group.
type Grouped = (Vec<String>, [Vec<Option<f64>>; 2]);

/// One group per figure name, one series per side: `series[side][figure]`.
fn grouped(writes: &Value, figures: &[(&str, Figure<'_>)]) -> Grouped {
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

    // One chart: journal on beside journal off, against the target line.
    let mut chart =
        |file: &str, title: String, y_desc: &str, (names, [on, off]): Grouped, target: (f64, &str), log_y: bool| {
            // A log scale cannot show zero: a zero bar is left out there (the table has it).
            let shown = |v: Vec<Option<f64>>| v.into_iter().map(|x| x.filter(|x| !log_y || *x > 0.0)).collect();
            let p = dir.join(file);
            let spec = Bars {
                title: &title,
                y_desc,
                names,
                series: vec![("journal on", shown(on)), ("journal off", shown(off))],
                reference: Some((target.0, target.1.to_owned())),
                log_y,
                value_fmt: if target.0 < 1.0 { |v| format!("{v:.4}") } else { |v| format!("{v:.0}") },
            };
            bars(&p, &spec).map_err(err)?;
            written.push(p);
            Ok::<(), String>(())
        };
    chart(
        "writes_requests_per_lookup.png",
        format!("Origin requests per warm edge lookup ({rate})"),
        "requests per lookup",
        grouped(
            writes,
            &[
                ("forwarded lookups", &per_lookup("forwarded")),
                ("journal requests", &per_lookup("journal")),
                ("manifests", &per_lookup("manifest")),
                ("segments", &per_lookup("segment")),
                ("all", &per_lookup("total")),
            ],
        ),
        (0.21, "0.21 target (journal on)"),
        false,
    )?;
    chart(
        "writes_bytes_per_write.png",
        format!("Bytes from the origin to the edge per write, log scale ({rate})"),
        "bytes per write",
        grouped(
            writes,
            &[
                ("manifests", &per_write("manifest")),
                ("segments", &per_write("segment")),
                ("journal", &per_write("journal")),
                ("to stay fresh (all three)", &per_write("freshness")),
            ],
        ),
        (64.0, "64 B target (journal on)"),
        true,
    )?;
    chart(
        "writes_freshness_lag.png",
        format!("Freshness lag: acknowledged to \"seen\" at the edge, ms ({rate})"),
        "ms",
        grouped(writes, &[("p50", &front("lag_p50_ms")), ("p99", &front("lag_p99_ms")), ("max", &front("lag_max_ms"))]),
        (2000.0, "2 s target (p99)"),
        false,
    )?;
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
