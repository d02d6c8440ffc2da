//! What the writes A/B measured: per side and round, the writes-only phase and the front run;
//! the side-by-side table of medians over rounds, one line per run, and the checks.

use super::isolate::IsolateFigures;
use crate::check::Check;
use crate::counting_proxy::{PerKind, ProxyTally};
use crate::driver::Errors;
use crate::stats::median;
use crate::writes::{ProbeOutcome, WriteStats};
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// Writes, their latency and errors in one phase.
#[derive(Clone, Debug, Serialize)]
pub struct WriteFigures {
    /// Writes acknowledged.
    pub writes: u64,
    /// Seconds of the phase.
    pub seconds: f64,
    /// Acknowledged writes per second.
    pub writes_per_sec: f64,
    /// Latency from when the write was due, ms.
    pub p50_ms: f64,
    /// 99th percentile, ms.
    pub p99_ms: f64,
    /// Slowest, ms.
    pub max_ms: f64,
    /// Failed writes.
    pub errors: Errors,
}

impl WriteFigures {
    pub(crate) fn of(s: &WriteStats) -> WriteFigures {
        WriteFigures {
            writes: s.acked,
            seconds: s.seconds,
            writes_per_sec: s.rate(),
            p50_ms: s.quantile_ms(0.5),
            p99_ms: s.quantile_ms(0.99),
            max_ms: s.latency_us.max() as f64 / 1000.0,
            errors: s.errors.clone(),
        }
    }
}

/// The writes-only phase: what the write path costs the origin.
#[derive(Clone, Debug, Serialize)]
pub struct OriginWrites {
    /// The writes.
    pub writes: WriteFigures,
    /// The origin's own count of acknowledged writes (cross-check).
    pub origin_writes_counted: f64,
    /// CPU per acknowledged write by process group, µs.
    pub cpu_us_per_write: BTreeMap<String, f64>,
    /// Redis commands per acknowledged write, by command (Redis's own count; commands run by a
    /// script count under their names too; other clients of the same Redis would show here).
    pub redis_calls_per_write: BTreeMap<String, f64>,
    /// Redis's time per acknowledged write by command, µs (a script's includes its commands').
    pub redis_usec_per_write: BTreeMap<String, f64>,
    /// CPU by process group, cores busy on average.
    pub cpu_cores: BTreeMap<String, f64>,
}

/// The front serving lookups while keys are written.
#[derive(Clone, Debug, Serialize)]
pub struct FrontRun {
    /// What served the lookups.
    pub front: String,
    /// Its freshness bound, s: 0 for the origin itself (read-your-writes).
    pub bound_secs: f64,
    /// Lookups of the load (answered), present and absent keys.
    pub lookups: u64,
    /// Of those per second.
    pub lookups_per_sec: f64,
    /// Lookup latency, ms.
    pub lookup_p50_ms: f64,
    /// 99th percentile, ms.
    pub lookup_p99_ms: f64,
    /// Failed lookups of the load.
    pub lookup_errors: Errors,
    /// Answers by `x-bloomgate-answered-by`.
    pub answered_by: BTreeMap<String, u64>,
    /// The writes meanwhile.
    pub writes: WriteFigures,
    /// Keys followed.
    pub probes: u64,
    /// Of those, never "seen" within the bound plus the margin: must be 0.
    pub never_seen: u64,
    /// Lookups the probes made.
    pub probe_polls: u64,
    /// Probe lookups that failed, by kind.
    pub probe_errors: Errors,
    /// Acknowledgement to "seen", ms.
    pub lag_p50_ms: Option<f64>,
    /// 99th percentile, ms.
    pub lag_p99_ms: Option<f64>,
    /// Slowest, ms.
    pub lag_max_ms: Option<f64>,
    /// Present keys answered "not seen" (load: any; probes: asked for later than the bound after
    /// the acknowledgement) and absent keys answered "seen": must be 0.
    pub wrong_answers: u64,
    /// Lookups at the front, load and probes together: the denominator of the per-lookup figures.
    pub front_lookups: u64,
    /// What the edge asked of the origin and got back (None without an edge).
    pub traffic: Option<ProxyTally>,
    /// Requests to the origin per 1,000 front lookups, by kind.
    pub requests_per_1k_lookups: BTreeMap<String, f64>,
    /// Response body bytes from the origin per 1,000 front lookups, by kind.
    pub bytes_per_1k_lookups: BTreeMap<String, f64>,
    /// Response body bytes from the origin per acknowledged write, by kind.
    pub bytes_per_write: BTreeMap<String, f64>,
    /// The origin's own count of manifests, segments and journal chunks served (cross-check).
    pub origin_served: BTreeMap<String, f64>,
    /// CPU by process group, cores busy on average.
    pub cpu_cores: BTreeMap<String, f64>,
    /// What the edge isolate said about itself over the run (None without an edge, or one
    /// without the report).
    pub isolate: Option<IsolateFigures>,
    /// Every followed key.
    pub probe_outcomes: Vec<ProbeOutcome>,
}

/// One side in one round.
#[derive(Clone, Debug, Serialize)]
pub struct WriteRun {
    /// `journal` or `no-journal`.
    pub side: String,
    /// The origin's `journal_enabled`.
    pub journal_enabled: bool,
    /// Round, from 1.
    pub round: usize,
    /// Filter written to.
    pub filter: String,
    /// The writes-only phase, if any.
    pub origin_writes: Option<OriginWrites>,
    /// The front run.
    pub front: FrontRun,
    /// The origin's stats of the filter afterwards (journal entries and bytes in Redis).
    pub filter_stats: serde_json::Value,
}

/// The whole A/B.
#[derive(Clone, Debug, Serialize)]
pub struct WritesReport {
    /// Settings, as given.
    pub settings: BTreeMap<String, String>,
    /// One per side and round, in the order run.
    pub runs: Vec<WriteRun>,
}

pub(crate) fn scaled(m: &BTreeMap<String, f64>, factor: f64) -> BTreeMap<String, f64> {
    m.iter().map(|(k, v)| (k.clone(), v * factor)).collect()
}

/// `d` by kind, each divided by `n`, plus the freshness traffic and the total.
pub(crate) fn per(d: &PerKind, n: f64) -> BTreeMap<String, f64> {
    let n = n.max(1.0);
    [
        ("manifest", d.manifests),
        ("segment", d.segments),
        ("journal", d.journals),
        ("forwarded", d.forwarded()),
        ("other", d.other),
        ("freshness", d.freshness()),
        ("total", d.total()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v as f64 / n))
    .collect()
}

fn fmt(v: Option<f64>, digits: usize) -> String {
    v.map_or("–".into(), |v| format!("{v:.digits$}"))
}

/// A row of the side-by-side table: what it shows and how to read it from a run.
type Row = (&'static str, usize, fn(&WriteRun) -> Option<f64>);

fn get(m: &BTreeMap<String, f64>, k: &str) -> Option<f64> {
    m.get(k).copied()
}

fn redis_per_write(r: &WriteRun, command: &str, usec: bool) -> Option<f64> {
    let o = r.origin_writes.as_ref()?;
    let m = if usec { &o.redis_usec_per_write } else { &o.redis_calls_per_write };
    // Ran in the phase but not this command: zero, not unknown.
    (!m.is_empty()).then(|| get(m, command).unwrap_or(0.0))
}

fn isolate_cpu(r: &WriteRun, kind: &str) -> Option<f64> {
    r.front.isolate.as_ref().and_then(|i| get(&i.cpu_us, kind))
}

fn origin_cpu(r: &WriteRun, group: &str) -> Option<f64> {
    r.origin_writes.as_ref().and_then(|o| get(&o.cpu_us_per_write, group))
}

const ROWS: &[Row] = &[
    ("writes acknowledged/s, writes only", 1, |r| r.origin_writes.as_ref().map(|o| o.writes.writes_per_sec)),
    ("write latency p50, ms, writes only", 2, |r| r.origin_writes.as_ref().map(|o| o.writes.p50_ms)),
    ("write latency p99, ms, writes only", 2, |r| r.origin_writes.as_ref().map(|o| o.writes.p99_ms)),
    ("origin CPU per write, µs, writes only", 0, |r| origin_cpu(r, "origin")),
    ("Redis CPU per write, µs, writes only", 0, |r| origin_cpu(r, "redis")),
    ("Cassandra CPU per write, µs, writes only", 0, |r| origin_cpu(r, "cassandra")),
    ("Redis commands per write (script-run included), writes only", 2, |r| {
        r.origin_writes.as_ref().map(|o| o.redis_calls_per_write.values().sum())
    }),
    ("Redis scripts (EVALSHA) per write, writes only", 2, |r| redis_per_write(r, "evalsha", false)),
    ("Redis XADD per write, writes only", 2, |r| redis_per_write(r, "xadd", false)),
    ("Redis time in scripts per write, µs, writes only", 1, |r| redis_per_write(r, "evalsha", true)),
    ("loadgen CPU per write, µs, writes only", 0, |r| origin_cpu(r, "loadgen")),
    ("writes acknowledged/s, with lookups", 1, |r| Some(r.front.writes.writes_per_sec)),
    ("write latency p50, ms, with lookups", 2, |r| Some(r.front.writes.p50_ms)),
    ("write latency p99, ms, with lookups", 2, |r| Some(r.front.writes.p99_ms)),
    ("lookups/s (load)", 1, |r| Some(r.front.lookups_per_sec)),
    ("lookup latency p50, ms", 2, |r| Some(r.front.lookup_p50_ms)),
    ("lookup latency p99, ms", 2, |r| Some(r.front.lookup_p99_ms)),
    ("freshness lag p50, ms", 0, |r| r.front.lag_p50_ms),
    ("freshness lag p99, ms", 0, |r| r.front.lag_p99_ms),
    ("freshness lag max, ms", 0, |r| r.front.lag_max_ms),
    ("keys followed", 0, |r| Some(r.front.probes as f64)),
    ("never seen within S + margin", 0, |r| Some(r.front.never_seen as f64)),
    ("manifests per 1,000 lookups", 2, |r| get(&r.front.requests_per_1k_lookups, "manifest")),
    ("segments per 1,000 lookups", 2, |r| get(&r.front.requests_per_1k_lookups, "segment")),
    ("journal chunks per 1,000 lookups", 2, |r| get(&r.front.requests_per_1k_lookups, "journal")),
    ("forwarded lookups per 1,000 lookups", 1, |r| get(&r.front.requests_per_1k_lookups, "forwarded")),
    ("KB origin→edge per 1,000 lookups: manifests", 1, |r| kb(get(&r.front.bytes_per_1k_lookups, "manifest"))),
    ("KB per 1,000 lookups: segments", 1, |r| kb(get(&r.front.bytes_per_1k_lookups, "segment"))),
    ("KB per 1,000 lookups: journal", 1, |r| kb(get(&r.front.bytes_per_1k_lookups, "journal"))),
    ("KB per 1,000 lookups: forwarded lookups", 1, |r| kb(get(&r.front.bytes_per_1k_lookups, "forwarded"))),
    ("KB per 1,000 lookups: all", 1, |r| kb(get(&r.front.bytes_per_1k_lookups, "total"))),
    ("bytes per write: manifests", 0, |r| get(&r.front.bytes_per_write, "manifest")),
    ("bytes per write: segments", 0, |r| get(&r.front.bytes_per_write, "segment")),
    ("bytes per write: journal", 0, |r| get(&r.front.bytes_per_write, "journal")),
    ("bytes per write: freshness (manifests + segments + journal)", 0, |r| get(&r.front.bytes_per_write, "freshness")),
    ("bytes per write: all (forwarded lookups too)", 0, |r| get(&r.front.bytes_per_write, "total")),
    ("Cache API reads per lookup (isolate)", 3, |r| r.front.isolate.as_ref().map(|i| i.cache_reads_per_lookup)),
    ("copies brought forward from the isolate's tail per lookup", 3, |r| {
        r.front.isolate.as_ref().map(|i| i.local_catch_ups_per_lookup)
    }),
    ("Cache API write-backs", 0, |r| r.front.isolate.as_ref().map(|i| i.cache_write_backs as f64)),
    ("isolate CPU per edge \"no\", µs", 1, |r| isolate_cpu(r, "edge_no")),
    ("isolate CPU per forwarded lookup, µs (waits excluded)", 1, |r| isolate_cpu(r, "forwarded")),
    ("isolate CPU per batch key, µs", 1, |r| isolate_cpu(r, "batch_key")),
    ("isolate CPU per journal chunk taken in, µs", 1, |r| isolate_cpu(r, "catch_up")),
    ("isolate CPU per segment decode, µs", 1, |r| isolate_cpu(r, "segment_decode")),
    ("isolate wasm memory at the end, MiB", 1, |r| r.front.isolate.as_ref().map(|i| i.wasm_mib)),
    ("isolate held at the end, MiB", 1, |r| r.front.isolate.as_ref().map(|i| i.held_mib)),
    ("CPU cores: edge", 2, |r| get(&r.front.cpu_cores, "edge")),
    ("CPU cores: origin", 2, |r| get(&r.front.cpu_cores, "origin")),
    ("CPU cores: redis", 2, |r| get(&r.front.cpu_cores, "redis")),
    ("CPU cores: cassandra", 2, |r| get(&r.front.cpu_cores, "cassandra")),
    ("CPU cores: loadgen", 2, |r| get(&r.front.cpu_cores, "loadgen")),
    ("CPU cores: others on the machine", 2, |r| get(&r.front.cpu_cores, "zz-others")),
    ("journal entries in Redis after the run", 0, |r| r.filter_stats["journal_entries"].as_f64()),
    ("journal bytes in Redis after the run", 0, |r| r.filter_stats["journal_bytes"].as_f64()),
    ("errors: lookups, writes, probes", 0, |r| Some(errors(r) as f64)),
    ("wrong answers", 0, |r| Some(r.front.wrong_answers as f64)),
];

/// Failed lookups, writes (both phases) and probe lookups of a run.
fn errors(r: &WriteRun) -> u64 {
    let f = &r.front;
    let writes_only = r.origin_writes.as_ref().map_or(0, |o| o.writes.errors.total());
    f.lookup_errors.total() + f.writes.errors.total() + f.probe_errors.total() + writes_only
}

fn kb(v: Option<f64>) -> Option<f64> {
    v.map(|b| b / 1000.0)
}

impl WritesReport {
    /// The runs of one side.
    fn side(&self, journal: bool) -> impl Iterator<Item = &WriteRun> {
        self.runs.iter().filter(move |r| r.journal_enabled == journal)
    }

    /// A figure's median over one side's rounds.
    pub fn median(&self, journal: bool, f: fn(&WriteRun) -> Option<f64>) -> Option<f64> {
        median(self.side(journal).filter_map(f).collect())
    }

    /// Median bytes per write that kept the edge fresh, journal on and off.
    pub fn freshness_bytes_per_write(&self, journal: bool) -> Option<f64> {
        self.median(journal, |r| get(&r.front.bytes_per_write, "freshness"))
    }

    /// The side-by-side table (medians over rounds) and one line per run, in Markdown.
    pub fn markdown(&self) -> String {
        let mut out = String::new();
        let rounds = self.side(true).count();
        let front = self.runs.first().map_or("", |r| r.front.front.as_str());
        let _ = writeln!(
            out,
            "\nWrites A/B ({front}; {} writes/s; medians over {rounds} round(s)):\n",
            self.settings.get("write_rate").map_or("?", String::as_str)
        );
        let _ = writeln!(out, "| | journal on | journal off | on ÷ off |");
        let _ = writeln!(out, "|---|---:|---:|---:|");
        for (label, digits, f) in ROWS {
            let (on, off) = (self.median(true, *f), self.median(false, *f));
            if on.is_none() && off.is_none() {
                continue;
            }
            let ratio = match (on, off) {
                (Some(a), Some(b)) if b != 0.0 => format!("{:.2}", a / b),
                _ => "–".into(),
            };
            let _ = writeln!(out, "| {label} | {} | {} | {ratio} |", fmt(on, *digits), fmt(off, *digits));
        }
        let _ = writeln!(
            out,
            "\n| round | side | writes/s | origin µs/write | write p50 ms | lookups/s | lookup p50 / p99 ms | lag p50 / p99 / max ms | never seen | segments | journal chunks | bytes/write (freshness) | others, cores | errors | wrong |"
        );
        let _ = writeln!(out, "|---|---|---:|---:|---:|---:|---|---|---:|---:|---:|---:|---:|---:|---:|");
        for r in &self.runs {
            let f = &r.front;
            let _ = writeln!(
                out,
                "| {} | {} | {:.1} | {} | {} | {:.1} | {:.0} / {:.0} | {} / {} / {} | {} | {} | {} | {} | {} | {} | {} |",
                r.round,
                r.side,
                f.writes.writes_per_sec,
                fmt(origin_cpu(r, "origin"), 0),
                fmt(r.origin_writes.as_ref().map(|o| o.writes.p50_ms), 2),
                f.lookups_per_sec,
                f.lookup_p50_ms,
                f.lookup_p99_ms,
                fmt(f.lag_p50_ms, 0),
                fmt(f.lag_p99_ms, 0),
                fmt(f.lag_max_ms, 0),
                f.never_seen,
                f.traffic.map_or("–".into(), |t| t.requests.segments.to_string()),
                f.traffic.map_or("–".into(), |t| t.requests.journals.to_string()),
                fmt(get(&f.bytes_per_write, "freshness"), 0),
                fmt(get(&f.cpu_cores, "zz-others"), 2),
                errors(r),
                f.wrong_answers,
            );
        }
        out
    }
}

/// What the insert journal promises, as checks: every written key seen within S (+ the probe's margin),
/// no wrong answers, no errors.
pub fn checks(w: &WritesReport) -> Vec<Check> {
    let never: u64 = w.runs.iter().map(|r| r.front.never_seen).sum();
    let probes: u64 = w.runs.iter().map(|r| r.front.probes).sum();
    let wrong: u64 = w.runs.iter().map(|r| r.front.wrong_answers).sum();
    let errors: u64 = w.runs.iter().map(errors).sum();
    let lag_max = w.runs.iter().filter_map(|r| r.front.lag_max_ms).fold(0.0, f64::max);
    let bound = w.runs.first().map_or(0.0, |r| r.front.bound_secs);
    let mut out = vec![Check {
        target: format!(
            "writes: every followed key \"seen\" at the front within S = {bound} s (+ margin), no wrong answers"
        ),
        measured: format!("{never} of {probes} never seen, slowest {lag_max:.0} ms; {wrong} wrong answers"),
        met: never == 0 && wrong == 0 && probes > 0,
    }];
    out.push(Check {
        target: "writes A/B: no errors (lookups, writes, probes)".into(),
        measured: format!("{errors} errors"),
        met: errors == 0,
    });
    if let (Some(on), Some(off)) = (w.freshness_bytes_per_write(true), w.freshness_bytes_per_write(false)) {
        out.push(Check {
            target: "bytes per write to keep the edge fresh, journal on vs off (in proportion to writes)".into(),
            measured: format!("{on:.0} vs {off:.0} bytes per write ({:.3} ×)", on / off.max(1e-9)),
            met: on < off,
        });
    }
    out
}
