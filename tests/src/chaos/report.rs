//! The run's report: JSON for machines (`--report`), a Markdown summary for people (printed,
//! and appended to a file with `--summary`): the command, run length, operations by kind, the
//! fault table, one column per violation kind, and examples with their real keys.

use super::check::{CheckResult, Checked, ViolationKind};
use super::history::{Fault, FaultKind, History, Outcome, Target};
use super::keys::KeySpace;
use super::workload::WorkloadSettings;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

/// How one kind of fault went.
#[derive(Clone, Debug, Serialize)]
pub struct FaultRow {
    /// Fault name.
    pub fault: String,
    /// Times injected.
    pub injected: u64,
    /// Seconds of disturbance, summed.
    pub seconds: f64,
    /// For faults the origins repair: repaired / injected.
    pub repaired: Option<String>,
    /// The first injection's note.
    pub note: String,
}

/// One example violation, with its key spelled out.
#[derive(Clone, Debug, Serialize)]
pub struct Example {
    /// Rule.
    pub kind: String,
    /// Seconds into the run.
    pub at_secs: f64,
    /// Who answered.
    pub target: Option<String>,
    /// The key, as sent.
    pub key: Option<String>,
    /// What happened.
    pub detail: String,
}

/// Everything about a run.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// No violation and every fault injected.
    pub passed: bool,
    /// Violations, all kinds.
    pub violations: u64,
    /// How the run was started.
    pub command: String,
    /// Seed of keys and choices.
    pub seed: u64,
    /// Cassandra keyspace of the run.
    pub keyspace: String,
    /// Filter name.
    pub filter: String,
    /// Seconds from the first operation to the last.
    pub run_secs: f64,
    /// Origin processes.
    pub origins: usize,
    /// Whether the edge ran.
    pub edge: bool,
    /// The edge's S.
    pub freshness_secs: u32,
    /// Errors tolerated this long after a fault's end.
    pub allowance_secs: f64,
    /// RSS limit per origin.
    pub rss_limit_mib: u64,
    /// Rates.
    pub workload: WorkloadSettings,
    /// Workload operations recorded.
    pub ops_total: u64,
    /// By call and target.
    pub ops_by_kind: BTreeMap<String, u64>,
    /// By why they were sent.
    pub ops_by_why: BTreeMap<String, u64>,
    /// By outcome.
    pub outcomes: BTreeMap<String, u64>,
    /// Key answers by who answered.
    pub answered_by: BTreeMap<String, u64>,
    /// Operations not sent because too many were in flight: (to the origins, to the edge).
    pub skipped_ops: (u64, u64),
    /// Wall-clock time of the run's zero (UTC), for finding moments in the logs.
    pub started_at: String,
    /// Latency of answered operations by target and call: p50, p99, max in ms.
    pub latency_ms: BTreeMap<String, [f64; 3]>,
    /// Failed operations by target, status and the start of the body (the most frequent).
    pub errors: BTreeMap<String, u64>,
    /// Per fault kind.
    pub faults: Vec<FaultRow>,
    /// Fault kinds the schedule could not inject.
    pub faults_missing: Vec<String>,
    /// Every injection, in order.
    pub fault_log: Vec<Fault>,
    /// Automatic rebuilds the origins' logs show, by reason.
    pub automatic_rebuilds: BTreeMap<String, u64>,
    /// Highest RSS seen per origin.
    pub rss_max_mib: BTreeMap<String, f64>,
    /// What the checker looked at.
    pub checked: Checked,
    /// Violations per kind.
    pub violation_counts: BTreeMap<String, u64>,
    /// Violations per kind, by what was involved.
    pub violation_breakdown: BTreeMap<String, BTreeMap<String, u64>>,
    /// The first few of each kind.
    pub examples: Vec<Example>,
    /// What the harness noticed (missed phases, failed steps).
    pub harness_notes: Vec<String>,
    /// Where the processes' logs are.
    pub logs: Vec<String>,
}

/// What the report says beyond the history and the check.
pub struct RunFacts {
    /// Command line.
    pub command: String,
    /// Seed.
    pub seed: u64,
    /// Keyspace.
    pub keyspace: String,
    /// Filter.
    pub filter: String,
    /// Origins.
    pub origins: usize,
    /// Edge on.
    pub edge: bool,
    /// S.
    pub freshness_secs: u32,
    /// Allowance.
    pub allowance_secs: f64,
    /// RSS limit.
    pub rss_limit_mib: u64,
    /// Rates.
    pub workload: WorkloadSettings,
    /// Skipped operations: (to the origins, to the edge).
    pub skipped_ops: (u64, u64),
    /// Faults that had to be injected.
    pub required_faults: BTreeSet<FaultKind>,
    /// Automatic rebuild reasons from the logs.
    pub automatic_rebuilds: Vec<String>,
    /// Harness notes.
    pub notes: Vec<String>,
    /// Log paths.
    pub logs: Vec<String>,
}

/// What an error body says: the problem's `detail`, else the start of the body.
fn error_text(body: &str) -> String {
    let detail = serde_json::from_str::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v.get("detail").and_then(|d| d.as_str()).map(str::to_owned));
    detail.unwrap_or_else(|| body.chars().take(80).collect())
}

/// The gist of a client error: its innermost cause.
fn transport_text(error: &str) -> String {
    for cause in ["ConnectionReset", "ConnectionRefused", "IncompleteMessage", "TimedOut", "timed out"] {
        if error.contains(cause) {
            return cause.to_owned();
        }
    }
    error.chars().take(80).collect()
}

/// `YYYY-MM-DDTHH:MM:SS.mmmZ` from ms since the Unix epoch (civil-from-days, proleptic
/// Gregorian).
fn utc(unix_ms: u64) -> String {
    let (secs, ms) = (unix_ms / 1000, unix_ms % 1000);
    let (days, rest) = ((secs / 86_400) as i64, secs % 86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{ms:03}Z", rest / 3600, rest / 60 % 60, rest % 60)
}

/// Builds the report.
pub fn build(history: &History, check: &CheckResult, keys: &KeySpace, facts: RunFacts) -> Report {
    let mut ops_by_kind = BTreeMap::new();
    let mut ops_by_why = BTreeMap::new();
    let mut outcomes = BTreeMap::new();
    let mut answered_by = BTreeMap::new();
    for op in &history.ops {
        let target = match op.target {
            Target::Origin(_) => "origin",
            Target::Edge => "edge",
        };
        *ops_by_kind.entry(format!("{} via {target}", op.kind.name())).or_insert(0u64) += 1;
        *ops_by_why.entry(op.why.name().to_owned()).or_insert(0u64) += 1;
        let outcome = match &op.outcome {
            Outcome::Acked => "acked".to_owned(),
            Outcome::Answers(answers) => {
                for a in answers {
                    let seen = if a.seen { "seen" } else { "not seen" };
                    *answered_by.entry(format!("{target}: {seen} by {}", a.by.name())).or_insert(0u64) += 1;
                }
                "answered".to_owned()
            }
            Outcome::Status { code, retry_after, .. } => {
                format!("status {code}{}", if *retry_after { " + Retry-After" } else { "" })
            }
            Outcome::Transport { .. } => "no answer".to_owned(),
        };
        *outcomes.entry(outcome).or_insert(0u64) += 1;
    }
    let mut latencies: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    let mut errors: BTreeMap<String, u64> = BTreeMap::new();
    for op in &history.ops {
        let target = if op.target == Target::Edge { "edge" } else { "origin" };
        let call = if op.kind.is_lookup() { "lookups" } else { "writes and deletes" };
        latencies.entry(format!("{target} {call}")).or_default().push(op.end - op.start);
        let error = match &op.outcome {
            Outcome::Status { code, detail, .. } => format!("{target} {code}: {}", error_text(detail)),
            Outcome::Transport { error } => format!("{target} no answer: {}", transport_text(error)),
            _ => continue,
        };
        *errors.entry(error).or_insert(0) += 1;
    }
    let latency_ms = latencies
        .into_iter()
        .map(|(what, mut v)| {
            v.sort_unstable();
            let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize] as f64 / 1000.0;
            (what, [at(0.5), at(0.99), at(1.0)])
        })
        .collect();
    let first = history.ops.iter().map(|o| o.start).min().unwrap_or(0);
    let last = history.ops.iter().map(|o| o.end).max().unwrap_or(0);

    let mut faults = Vec::new();
    let mut missing = Vec::new();
    for kind in FaultKind::ALL {
        let of_kind: Vec<&Fault> = history.faults.iter().filter(|f| f.kind == kind).collect();
        if of_kind.is_empty() {
            if facts.required_faults.contains(&kind) {
                missing.push(kind.name().to_owned());
            }
            continue;
        }
        let repairs: Vec<bool> = of_kind.iter().filter_map(|f| f.recovered).collect();
        faults.push(FaultRow {
            fault: kind.name().to_owned(),
            injected: of_kind.len() as u64,
            seconds: of_kind.iter().map(|f| (f.end - f.start) as f64 / 1e6).sum(),
            repaired: (!repairs.is_empty())
                .then(|| format!("{}/{}", repairs.iter().filter(|r| **r).count(), repairs.len())),
            note: of_kind[0].note.clone(),
        });
    }
    let mut automatic_rebuilds = BTreeMap::new();
    for reason in facts.automatic_rebuilds {
        *automatic_rebuilds.entry(reason).or_insert(0u64) += 1;
    }
    let mut rss_max_mib: BTreeMap<String, f64> = BTreeMap::new();
    for s in &history.rss {
        let max = rss_max_mib.entry(format!("origin-{}", s.origin)).or_insert(0.0);
        *max = max.max(s.kib as f64 / 1024.0);
    }
    let examples = check
        .examples
        .values()
        .flatten()
        .map(|v| Example {
            kind: v.kind.name().to_owned(),
            at_secs: v.at as f64 / 1e6,
            target: v.target.map(|t| t.to_string()),
            key: v.key.map(|k| keys.hex(k)),
            detail: v.detail.clone(),
        })
        .collect();
    let violations = check.total();
    Report {
        passed: violations == 0 && missing.is_empty(),
        violations,
        command: facts.command,
        seed: facts.seed,
        keyspace: facts.keyspace,
        filter: facts.filter,
        run_secs: (last - first) as f64 / 1e6,
        origins: facts.origins,
        edge: facts.edge,
        freshness_secs: facts.freshness_secs,
        allowance_secs: facts.allowance_secs,
        rss_limit_mib: facts.rss_limit_mib,
        workload: facts.workload,
        ops_total: history.ops.len() as u64,
        ops_by_kind,
        ops_by_why,
        outcomes,
        answered_by,
        skipped_ops: facts.skipped_ops,
        started_at: utc(history.started_unix_ms),
        latency_ms,
        errors,
        faults,
        faults_missing: missing,
        fault_log: history.faults.clone(),
        automatic_rebuilds,
        rss_max_mib,
        checked: check.checked.clone(),
        violation_counts: check.counts.iter().map(|(k, n)| (k.name().to_owned(), *n)).collect(),
        violation_breakdown: check.breakdown.iter().map(|(k, by)| (k.name().to_owned(), by.clone())).collect(),
        examples,
        harness_notes: facts.notes,
        logs: facts.logs,
    }
}

/// The Markdown summary.
pub fn markdown(r: &Report) -> String {
    let mut md = String::new();
    let verdict = if r.passed {
        "PASSED: no violations".to_owned()
    } else if r.violations > 0 {
        format!("FAILED: {} violations", r.violations)
    } else {
        format!("FAILED: faults not injected: {}", r.faults_missing.join(", "))
    };
    let _ = writeln!(md, "### bloomgate-chaos: {verdict}\n");
    let _ = writeln!(md, "`{}`\n", r.command);
    let edge = if r.edge { format!(" + edge (S = {} s)", r.freshness_secs) } else { String::new() };
    let _ = writeln!(
        md,
        "{:.1} s from {}, seed {}, {} origins{edge}, keyspace `{}`; errors tolerated until {} s after a fault; RSS limit {} MiB.\n",
        r.run_secs, r.started_at, r.seed, r.origins, r.keyspace, r.allowance_secs, r.rss_limit_mib
    );
    let c = &r.checked;
    let _ = writeln!(
        md,
        "**{} operations checked** ({:.0}/s), {} key answers: {} had to be seen at an origin, {} at the edge, {} had to be not seen, {} unconstrained; {} acknowledged keys read back from Cassandra; {} tolerated errors; operations skipped at the client's in-flight caps: {} to the origins, {} to the edge.\n",
        c.ops,
        c.ops as f64 / r.run_secs.max(1e-9),
        c.answers,
        c.must_be_seen_origin,
        c.must_be_seen_edge,
        c.must_not_be_seen,
        c.unconstrained,
        c.db_keys,
        c.tolerated_errors,
        r.skipped_ops.0,
        r.skipped_ops.1
    );
    let answers: Vec<String> = r.answered_by.iter().map(|(what, n)| format!("{what} {n}")).collect();
    let _ = writeln!(md, "Answers: {}.\n", answers.join(", "));
    let _ = writeln!(md, "| operation | count |\n|---|---:|");
    for (kind, n) in &r.ops_by_kind {
        let _ = writeln!(md, "| {kind} | {n} |");
    }
    let _ = writeln!(md, "\n| outcome | count |\n|---|---:|");
    for (outcome, n) in &r.outcomes {
        let _ = writeln!(md, "| {outcome} | {n} |");
    }
    let _ = writeln!(md, "\n| latency | p50 ms | p99 ms | max ms |\n|---|---:|---:|---:|");
    for (what, [p50, p99, max]) in &r.latency_ms {
        let _ = writeln!(md, "| {what} | {p50:.1} | {p99:.1} | {max:.1} |");
    }
    if !r.errors.is_empty() {
        let mut errors: Vec<(&String, &u64)> = r.errors.iter().collect();
        errors.sort_by(|a, b| b.1.cmp(a.1));
        let _ = writeln!(md, "\n| failed operations (most frequent) | count |\n|---|---:|");
        for (what, n) in errors.into_iter().take(8) {
            let _ = writeln!(md, "| {} | {n} |", what.replace('|', "/"));
        }
    }
    let _ = writeln!(
        md,
        "\n| fault | injected | seconds | new generation in time | first note |\n|---|---:|---:|---:|---|"
    );
    for f in &r.faults {
        let _ = writeln!(
            md,
            "| {} | {} | {:.1} | {} | {} |",
            f.fault,
            f.injected,
            f.seconds,
            f.repaired.as_deref().unwrap_or("-"),
            f.note.replace('|', "/")
        );
    }
    for missing in &r.faults_missing {
        let _ = writeln!(md, "| {missing} | **0** | - | - | not injected |");
    }
    if !r.automatic_rebuilds.is_empty() {
        let rebuilds: Vec<String> = r.automatic_rebuilds.iter().map(|(why, n)| format!("{why} ×{n}")).collect();
        let _ = writeln!(md, "\nAutomatic rebuilds started (origin logs): {}.", rebuilds.join(", "));
    }
    let rss: Vec<String> = r.rss_max_mib.iter().map(|(o, m)| format!("{o} {m:.0} MiB")).collect();
    let _ = writeln!(md, "\nHighest RSS: {}.\n", rss.join(", "));
    let kinds: Vec<&str> = ViolationKind::ALL.iter().map(|k| k.name()).collect();
    let _ = writeln!(md, "| {} |", kinds.join(" | "));
    let _ = writeln!(md, "|{}", "---:|".repeat(kinds.len()));
    let counts: Vec<String> =
        kinds.iter().map(|k| r.violation_counts.get(*k).copied().unwrap_or(0).to_string()).collect();
    let _ = writeln!(md, "| {} |", counts.join(" | "));
    for (kind, by) in &r.violation_breakdown {
        let mut by: Vec<(&String, &u64)> = by.iter().collect();
        by.sort_by(|a, b| b.1.cmp(a.1));
        let parts: Vec<String> = by.iter().take(6).map(|(what, n)| format!("{what}: {n}")).collect();
        let _ = writeln!(md, "\n- **{kind}**: {}", parts.join("; "));
    }
    if !r.examples.is_empty() {
        let _ = writeln!(md, "\nExamples (first of each kind):\n");
        let mut shown: BTreeMap<&str, usize> = BTreeMap::new();
        for e in &r.examples {
            let n = shown.entry(e.kind.as_str()).or_insert(0);
            *n += 1;
            if *n > 3 {
                continue;
            }
            let key = e.key.as_deref().map(|k| format!(" key `{k}`")).unwrap_or_default();
            let _ = writeln!(md, "- {}: {}{key}", e.kind, e.detail);
        }
    }
    if !r.harness_notes.is_empty() {
        let _ = writeln!(md, "\nHarness notes: {}", r.harness_notes.join("; "));
    }
    md
}

/// Writes the history as JSON lines (one operation or fault per line, keys spelled out).
pub fn write_history(path: &std::path::Path, history: &History, keys: &KeySpace) -> std::io::Result<()> {
    use std::io::Write;
    let mut out = std::io::BufWriter::new(std::fs::File::create(path)?);
    for fault in &history.faults {
        writeln!(out, "{}", serde_json::json!({ "fault": fault }))?;
    }
    for op in &history.ops {
        let hex: Vec<String> = op.keys.iter().map(|k| keys.hex(*k)).collect();
        writeln!(out, "{}", serde_json::json!({ "op": op, "key_hex": hex }))?;
    }
    out.flush()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chaos::check::{check, CheckSettings};
    use crate::chaos::history::{Answer, AnsweredBy, Op, OpKind, Why};
    use crate::chaos::keys::KeyId;
    use std::time::Duration;

    #[test]
    fn times_are_printed_in_utc() {
        assert_eq!(utc(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(utc(951_782_400_123), "2000-02-29T00:00:00.123Z");
        assert_eq!(utc(1_796_281_478_437), "2026-12-03T07:04:38.437Z");
    }

    #[test]
    fn the_summary_has_a_column_per_violation_kind_and_names_missing_faults() {
        let k = KeyId::written(1);
        let history = History {
            ops: vec![
                Op {
                    kind: OpKind::Write,
                    why: Why::Write,
                    target: Target::Origin(1),
                    start: 0,
                    end: 10,
                    keys: vec![k],
                    outcome: Outcome::Acked,
                },
                Op {
                    kind: OpKind::Lookup,
                    why: Why::ReadAfterWrite,
                    target: Target::Origin(0),
                    start: 20,
                    end: 30,
                    keys: vec![k],
                    outcome: Outcome::Answers(vec![Answer { seen: false, by: AnsweredBy::Filter }]),
                },
            ],
            ..History::default()
        };
        let result = check(&history, &CheckSettings { freshness: 3_000_000, allowance: 0, rss_limit_kib: 1 << 20 });
        let keys = KeySpace::new(1);
        let workload = WorkloadSettings {
            write_rate: 1.0,
            read_rate: 1.0,
            edge_read_rate: 1.0,
            batch_rate: 1.0,
            batch_write_keys: 1,
            batch_lookup_keys: 1,
            delete_rate: 0.0,
            absent_share: 0.5,
            freshness: Duration::from_secs(3),
            max_in_flight: 1,
        };
        let facts = RunFacts {
            command: "bloomgate-chaos run".into(),
            seed: 1,
            keyspace: "chaos_x".into(),
            filter: "chaos".into(),
            origins: 2,
            edge: true,
            freshness_secs: 3,
            allowance_secs: 10.0,
            rss_limit_mib: 512,
            workload,
            skipped_ops: (0, 0),
            required_faults: [FaultKind::FlushAll].into(),
            automatic_rebuilds: vec![],
            notes: vec![],
            logs: vec![],
        };
        let report = build(&history, &result, &keys, facts);
        assert!(!report.passed);
        assert_eq!(report.violation_counts["false_negative_origin"], 1);
        assert_eq!(report.violation_counts["lost_write"], 1, "never read back");
        assert_eq!(report.faults_missing, vec!["flushall"]);
        assert_eq!(report.examples[0].key.as_deref(), Some(keys.hex(k).as_str()));
        let md = markdown(&report);
        for kind in ViolationKind::ALL {
            assert!(md.contains(kind.name()), "{md}");
        }
        assert!(md.contains("| flushall | **0** |"));
        assert!(serde_json::to_string(&report).is_ok());
    }
}
