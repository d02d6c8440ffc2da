//! A burst's report as Markdown (docs/bench/burst/summary.md), and the checks a run must pass.

use super::BurstReport;
use std::fmt::Write as _;

const MIB: f64 = 1048576.0;

/// What the run failed to show, one line each (empty = it holds).
pub fn failures(r: &BurstReport) -> Vec<String> {
    let mut out = Vec::new();
    if !r.survived || r.oom_kills > 0 {
        out.push(format!("the origin did not survive the burst ({} OOM kills)", r.oom_kills));
    }
    if r.peak_rss_bytes > r.limit_bytes {
        out.push(format!(
            "peak RSS {:.0} MiB is over the limit {:.0} MiB",
            r.peak_rss_bytes as f64 / MIB,
            r.limit_bytes as f64 / MIB
        ));
    }
    if r.acknowledged_keys_lost > 0 {
        out.push(format!("{} acknowledged keys not seen afterwards", r.acknowledged_keys_lost));
    }
    if !r.lookups_other.is_empty() || r.lookups_answered == 0 {
        out.push(format!("lookups not all answered: {} answered, others {:?}", r.lookups_answered, r.lookups_other));
    }
    if r.writes.get(&429).copied().unwrap_or(0) == 0 {
        out.push("no batch write was refused: the burst never reached the caps (more --writers)".into());
    }
    let (start, end) = r.burst_steps;
    let peak = r.signal.iter().flatten().copied().fold(0.0, f64::max);
    if peak <= 0.0 {
        out.push("the recorded signal never rose above 0".into());
    }
    if r.signal.get(start).copied().flatten().is_some_and(|v| v != 0.0) {
        out.push("the signal was not 0 before the burst".into());
    }
    if r.signal.last().copied().flatten().is_some_and(|v| v != 0.0) || r.signal.len() <= end {
        out.push("the signal was not back to 0 a window after the burst".into());
    }
    out
}

/// The report as Markdown.
pub fn markdown(r: &BurstReport, command: &str) -> String {
    let mut s = String::new();
    let answered: u64 = r.writes.iter().filter(|(status, _)| **status != 0).map(|(_, n)| n).sum();
    let _ = writeln!(s, "# An origin under a burst past its memory\n");
    let _ = writeln!(s, "`{command}`\n");
    let _ = writeln!(s, "| | |\n|---|---|");
    let _ = writeln!(s, "| confined by | {} at {:.0} MiB |", r.confined_by, r.limit_bytes as f64 / MIB);
    let _ = writeln!(
        s,
        "| burst | {} writers × one full batch write in flight ({:.1} MiB body each), {} s, a refused batch sent again after 100 ms |",
        r.writers,
        r.batch_body_bytes as f64 / MIB,
        r.burst_secs
    );
    let _ = writeln!(s, "| batch writes answered | {answered}: {:?} (status → count) |", r.writes);
    let _ = writeln!(s, "| refused with 429 | {:.1} % of those answered |", 100.0 * r.refused_share);
    if !r.write_failures.is_empty() {
        let _ = writeln!(s, "| batch writes with no answer, by cause | {:?} |", r.write_failures);
    }
    let _ = writeln!(s, "| lookups | {} answered 200/404, other {:?} |", r.lookups_answered, r.lookups_other);
    let _ = writeln!(
        s,
        "| peak RSS (VmHWM) | {:.0} MiB = {:.2} × the limit |",
        r.peak_rss_bytes as f64 / MIB,
        r.peak_rss_bytes as f64 / r.limit_bytes as f64
    );
    if let Some(peak) = r.cgroup_peak_bytes {
        let _ = writeln!(s, "| cgroup peak charge | {:.0} MiB |", peak as f64 / MIB);
    }
    let _ = writeln!(s, "| OOM kills / survived | {} / {} |", r.oom_kills, r.survived);
    let _ = writeln!(
        s,
        "| acknowledged keys looked up afterwards | {} checked, {} not seen |",
        r.acknowledged_keys_checked, r.acknowledged_keys_lost
    );
    let _ = writeln!(s, "\nCaps and budget at rest (from /metrics): {:?}\n", r.caps);
    let _ = writeln!(
        s,
        "## The autoscaling signal\n\n`bloomgate:overloaded_per_pod:rate1m` (429s per second), every {} s; the burst ran from {} s to {} s:\n",
        r.scrape_secs,
        r.burst_steps.0 as u64 * r.scrape_secs,
        r.burst_steps.1 as u64 * r.scrape_secs
    );
    let _ = writeln!(s, "| t (s) | 429/s |\n|---|---|");
    for (i, v) in r.signal.iter().enumerate() {
        if let Some(v) = v {
            let _ = writeln!(s, "| {} | {v:.2} |", i as u64 * r.scrape_secs);
        }
    }
    s
}
