//! The results of a bench run: per target, the sweep, the machine, the side-by-side targets as
//! checks, the JSON written to disk and the Markdown tables printed.

use crate::check::Check;
use crate::counting_proxy::ProxyTally;
use crate::driver::Errors;
use crate::writes_ab::results::WritesReport;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write;

/// One target's measured run.
#[derive(Clone, Debug, Serialize)]
pub struct TargetResult {
    /// Short name (`floor`, `baseline`, `filter`, `filter-negatives`, …).
    pub name: String,
    /// What it is.
    pub description: String,
    /// Share of lookups for absent keys.
    pub miss_share: f64,
    /// Connections the load generator held open.
    pub connections: usize,
    /// Total offered rate, when fixed; `None` = closed loop.
    pub fixed_rate: Option<f64>,
    /// Answered lookups.
    pub lookups: u64,
    /// Of which for present keys.
    pub hits: u64,
    /// Of which for absent keys.
    pub misses: u64,
    /// Measured wall time.
    pub seconds: f64,
    /// Answered lookups per second.
    pub lookups_per_sec: f64,
    /// Latency quantiles, ms.
    pub p50_ms: f64,
    /// 99th percentile, ms.
    pub p99_ms: f64,
    /// 99.9th percentile, ms.
    pub p999_ms: f64,
    /// Slowest, ms.
    pub max_ms: f64,
    /// Slowest answer in each second of the run, ms: a stall shows as one bad second, a slow
    /// system as many.
    pub max_ms_by_second: Vec<f64>,
    /// Failed requests by kind.
    pub errors: Errors,
    /// All failed requests.
    pub error_total: u64,
    /// Present keys answered 404 or absent keys answered 200.
    pub wrong_answers: u64,
    /// Answers by `x-bloomgate-answered-by`.
    pub answered_by: BTreeMap<String, u64>,
    /// Origin's `bloomgate_database_reads_total` delta per lookup.
    pub cassandra_reads_per_lookup: Option<f64>,
    /// Cassandra's own coordinator reads of the keys table per lookup (cross-check).
    pub cassandra_coordinator_reads_per_lookup: Option<f64>,
    /// Requests reaching the origin per lookup (edge only: counted by a proxy in front of it).
    pub origin_requests_per_lookup: Option<f64>,
    /// Those requests by kind.
    pub origin_requests: Option<ProxyTally>,
    /// Forwarded lookups minus lookups the edge did not answer itself: 0 when every edge
    /// "no" stayed at the edge.
    pub edge_no_forwarded: Option<i64>,
    /// Absent keys that got past the first filter, per absent key, as the client saw it.
    pub fp_observed: Option<f64>,
    /// The same from the origin's counters (`false_positives / (negatives + false_positives)`).
    pub fp_observed_origin: Option<f64>,
    /// Filter fall-throughs by reason during the run (timeouts etc.).
    pub fallthroughs: BTreeMap<String, f64>,
    /// CPU per process group, ms per 1000 lookups.
    pub cpu_ms_per_1k_lookups: BTreeMap<String, f64>,
    /// CPU per process group, cores busy on average.
    pub cpu_cores: BTreeMap<String, f64>,
}

/// One point of the miss-share × fp_rate sweep.
#[derive(Clone, Debug, Serialize)]
pub struct SweepPoint {
    /// The filter's configured false-positive rate.
    pub fp_rate: f64,
    /// Share of lookups for absent keys.
    pub miss_share: f64,
    /// Answered lookups.
    pub lookups: u64,
    /// Cassandra reads per lookup, measured (origin counter).
    pub reads_per_lookup: f64,
    /// `(1 − miss_share) + miss_share × fp_rate`.
    pub theory: f64,
    /// Observed false-positive ratio of the absent keys.
    pub fp_observed: Option<f64>,
    /// Share of the lookups that were for present keys (random around `1 − miss_share`).
    pub hit_share_measured: f64,
    /// Cassandra reads per lookup beyond the hits: the false positives' reads,
    /// `reads_per_lookup − hit_share_measured`.
    pub excess_reads_per_lookup: f64,
    /// `miss_share × fp_rate`.
    pub excess_theory: f64,
    /// The filter's own expected false-positive rate at its fill (origin's stats endpoint).
    pub filter_expected_fp: Option<f64>,
    /// Requests that failed (not wrong answers: those are counted apart).
    pub errors: u64,
    /// Wrong answers.
    pub wrong_answers: u64,
}

/// The machine the run was on.
#[derive(Clone, Debug, Serialize)]
pub struct Machine {
    /// Logical CPUs.
    pub nproc: usize,
    /// `/proc/cpuinfo` model name.
    pub cpu_model: String,
    /// Total RAM, GiB.
    pub ram_gib: f64,
    /// Kernel release.
    pub kernel: String,
    /// `/proc/loadavg` when the run started (others' work on the same machine shows here).
    pub loadavg_at_start: String,
}

impl Machine {
    /// Reads `/proc`.
    pub fn describe() -> Machine {
        let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
        let cpuinfo = read("/proc/cpuinfo");
        let cpu_model = cpuinfo
            .lines()
            .find_map(|l| l.strip_prefix("model name"))
            .map(|l| l.trim_start_matches([' ', '\t', ':']).to_owned())
            .unwrap_or_default();
        let ram_kib: f64 = read("/proc/meminfo")
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|l| l.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0.0);
        Machine {
            nproc: std::thread::available_parallelism().map_or(0, |n| n.get()),
            cpu_model,
            ram_gib: (ram_kib / 1024.0 / 1024.0 * 10.0).round() / 10.0,
            kernel: read("/proc/sys/kernel/osrelease").trim().to_owned(),
            loadavg_at_start: read("/proc/loadavg").trim().to_owned(),
        }
    }
}

/// Everything one bench run produced.
#[derive(Clone, Debug, Serialize)]
pub struct BenchReport {
    /// The command line or test that produced it.
    pub command: String,
    /// The machine.
    pub machine: Machine,
    /// The settings, as given.
    pub settings: BTreeMap<String, String>,
    /// Side-by-side targets.
    pub targets: Vec<TargetResult>,
    /// Miss share × fp_rate sweep.
    pub sweep: Vec<SweepPoint>,
    /// Why the sweep stopped early, if it did.
    pub sweep_error: Option<String>,
    /// The targets, as checks.
    pub checks: Vec<Check>,
    /// The origin's `/stats` of every filter used, after the runs (sizing, fill, FPR).
    pub filter_stats: BTreeMap<String, serde_json::Value>,
    /// The writes A/B, if run.
    pub writes: Option<WritesReport>,
    /// Why the writes A/B stopped, if it did.
    pub writes_error: Option<String>,
    /// Wall time of the whole run, s.
    pub wall_seconds: f64,
}

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map_or("–".into(), |v| format!("{v:.digits$}"))
}

impl BenchReport {
    /// A target by name.
    pub fn target(&self, name: &str) -> Option<&TargetResult> {
        self.targets.iter().find(|t| t.name == name)
    }

    /// The side-by-side table, the sweep and the checks in Markdown.
    pub fn markdown(&self) -> String {
        let mut out = String::new();
        if self.targets.is_empty() {
            // Only the writes A/B ran.
            if let Some(w) = &self.writes {
                out.push_str(&w.markdown());
            }
            self.checks_markdown(&mut out);
            return out;
        }
        self.targets_markdown(&mut out);
        if self.targets.iter().any(|t| !t.cpu_cores.is_empty()) {
            self.cpu_markdown(&mut out);
        }
        if !self.sweep.is_empty() {
            self.sweep_markdown(&mut out);
        }
        if let Some(w) = &self.writes {
            out.push_str(&w.markdown());
        }
        self.checks_markdown(&mut out);
        out
    }

    /// One line per target: rate, latency, what reached the back, errors.
    fn targets_markdown(&self, out: &mut String) {
        let _ = writeln!(
            out,
            "| target | miss share | conns | lookups/s | p50 ms | p99 ms | p99.9 ms | Cassandra reads/lookup (origin · Cassandra) | origin requests/lookup | observed FP | Redis fall-throughs/lookup | errors | wrong |"
        );
        let _ = writeln!(out, "|---|---|---|---|---|---|---|---|---|---|---|---|---|");
        for t in &self.targets {
            let rate = match t.fixed_rate {
                Some(r) => format!("{:.0} (fixed {:.0})", t.lookups_per_sec, r),
                None => format!("{:.0}", t.lookups_per_sec),
            };
            // The edge's FP is what it forwarded; the origin's is its own counter (fall-throughs
            // are counted apart).
            let fp = if t.origin_requests.is_some() { t.fp_observed } else { t.fp_observed_origin };
            let fall: f64 = t.fallthroughs.iter().filter(|(r, _)| *r != "disabled").map(|(_, v)| v).sum::<f64>() + 0.0; // not −0
            let has_filter = t.fp_observed.is_some();
            let _ = writeln!(
                out,
                "| {} | {:.0} % | {} | {} | {:.2} | {:.2} | {:.2} | {} · {} | {} | {} | {} | {} | {} |",
                t.name,
                t.miss_share * 100.0,
                t.connections,
                rate,
                t.p50_ms,
                t.p99_ms,
                t.p999_ms,
                opt(t.cassandra_reads_per_lookup, 3),
                opt(t.cassandra_coordinator_reads_per_lookup, 3),
                opt(t.origin_requests_per_lookup, 3),
                opt(fp.map(|f| f * 100.0), 2) + if fp.is_some() { " %" } else { "" },
                if has_filter { format!("{:.4}", fall / t.lookups.max(1) as f64) } else { "–".into() },
                t.error_total,
                t.wrong_answers,
            );
        }
    }

    /// Cores busy per process group and target.
    fn cpu_markdown(&self, out: &mut String) {
        let mut groups: Vec<&String> = self.targets.iter().flat_map(|t| t.cpu_cores.keys()).collect();
        groups.sort();
        groups.dedup();
        let _ = writeln!(out, "\nCPU, cores busy on average during each run (2 = the whole machine; zz-others = everything else on it):\n");
        let _ = write!(out, "| target |");
        for g in &groups {
            let _ = write!(out, " {g} |");
        }
        let _ = write!(out, "\n|---|");
        for _ in &groups {
            let _ = write!(out, "---|");
        }
        let _ = writeln!(out);
        for t in &self.targets {
            let _ = write!(out, "| {} |", t.name);
            for g in &groups {
                let _ = write!(out, " {} |", opt(t.cpu_cores.get(*g).copied(), 2));
            }
            let _ = writeln!(out);
        }
    }

    /// One line per point of the sweep, against theory.
    fn sweep_markdown(&self, out: &mut String) {
        let _ = writeln!(
            out,
            "\n| fp_rate | miss share | lookups | Cassandra reads/lookup | theory | excess reads/lookup (FP) | theory m×fp | observed FP | filter's expected FP | errors |"
        );
        let _ = writeln!(out, "|---|---|---|---|---|---|---|---|---|---|");
        for p in &self.sweep {
            let _ = writeln!(
                out,
                "| {} % | {:.0} % | {} | {:.4} | {:.4} | {:.5} | {:.5} | {} | {} | {} |",
                p.fp_rate * 100.0,
                p.miss_share * 100.0,
                p.lookups,
                p.reads_per_lookup,
                p.theory,
                p.excess_reads_per_lookup,
                p.excess_theory,
                opt(p.fp_observed.map(|f| f * 100.0), 3) + if p.fp_observed.is_some() { " %" } else { "" },
                opt(p.filter_expected_fp.map(|f| f * 100.0), 3)
                    + if p.filter_expected_fp.is_some() { " %" } else { "" },
                p.errors,
            );
        }
    }

    fn checks_markdown(&self, out: &mut String) {
        if !self.checks.is_empty() {
            let _ = writeln!(out, "\n| target | measured | met |");
            let _ = writeln!(out, "|---|---|---|");
            for c in &self.checks {
                let _ = writeln!(out, "| {} | {} | {} |", c.target, c.measured, if c.met { "yes" } else { "**no**" });
            }
        }
    }
}
