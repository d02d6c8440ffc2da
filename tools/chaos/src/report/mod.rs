//! The run's report: JSON for machines (`--report`), a Markdown summary for people (printed,
//! and appended to a file with `--summary`): the command, run length, operations by kind, the
//! fault tables (injected, and observed by the prober), one column per violation kind, and
//! examples with their real keys.
//!
//! # Layout
//! - this file: the report's contents, built from the history and the check.
//! - [`markdown`]: the summary.
//! - `text`: how errors and times are spelled.

mod markdown;
mod text;

pub use markdown::markdown;

use crate::check::availability::Share;
use crate::check::excuses;
use crate::check::floors::Floor;
use crate::check::{CheckResult, Checked};
use crate::history::{EdgeDown, Fault, FaultKind, History, Outcome, Target};
use crate::keys::KeySpace;
use crate::workload::WorkloadSettings;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use text::{error_text, transport_text, utc};

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

/// How one kind of observed stall went (nobody injected it: the prober saw it).
#[derive(Clone, Debug, Serialize)]
pub struct ObservedRow {
    /// Fault name.
    pub fault: String,
    /// Windows observed.
    pub windows: u64,
    /// Seconds of them, summed.
    pub seconds: f64,
    /// Windows that overlap no injected fault's window (stretched as its excuses are): stalls of
    /// their own.
    pub outside_injected: u64,
    /// The longest window's note.
    pub note: String,
}

/// One example violation, with its key spelled out.
#[derive(Clone, Debug, Serialize)]
pub struct Example {
    /// The rule it broke.
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

/// The share of writes acknowledged while one kind of fault was on.
#[derive(Clone, Debug, Serialize)]
pub struct AvailabilityRow {
    /// Fault name (or `outside every fault`).
    pub during: String,
    /// Writes (single and batch) overlapping its windows, and acknowledged.
    pub writes: Share,
    /// `writes.ok / writes.total`.
    pub acknowledged: Option<f64>,
}

/// Everything about a run.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// No violation, every evidence floor met (every fault injected among them).
    pub passed: bool,
    /// Violations, all kinds.
    pub violations: u64,
    /// How the run was set up (its fields appear at the report's top level).
    #[serde(flatten)]
    pub settings: RunSettings,
    /// Seconds from the first operation to the last.
    pub run_secs: f64,
    /// The edge stopped answering, if it did (and what that cost).
    pub edge_down: Option<EdgeDown>,
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
    /// Per injected fault kind.
    pub faults: Vec<FaultRow>,
    /// Fault kinds the schedule could not inject.
    pub faults_missing: Vec<String>,
    /// Per observed stall kind (those seen at least once).
    pub observed: Vec<ObservedRow>,
    /// Every fault, injected or observed, in the order they ended.
    pub fault_log: Vec<Fault>,
    /// Automatic rebuilds the origins' logs show, by reason.
    pub automatic_rebuilds: BTreeMap<String, u64>,
    /// Highest RSS seen per origin and for the edge (`workerd`).
    pub rss_max_mib: BTreeMap<String, f64>,
    /// What the checker looked at.
    pub checked: Checked,
    /// The evidence floors, met or not.
    pub floors: Vec<Floor>,
    /// Per origin, what its `/metrics` and log said (local copies' answers, journal resets).
    pub origin_counters: BTreeMap<u8, crate::history::OriginCounters>,
    /// The floors not met, by name.
    pub floors_unmet: Vec<String>,
    /// Errors excused, per fault kind, by target, operation and status.
    pub excused: BTreeMap<String, BTreeMap<String, u64>>,
    /// Writes acknowledged during each kind of fault, and outside every fault.
    pub availability: Vec<AvailabilityRow>,
    /// Operations outside every fault's window, and how many succeeded.
    pub ops_outside_faults: Share,
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

/// How a run was set up, as the report states it.
#[derive(Clone, Debug, Serialize)]
pub struct RunSettings {
    /// How the run was started.
    pub command: String,
    /// Seed of keys and choices.
    pub seed: u64,
    /// Cassandra keyspace of the run.
    pub keyspace: String,
    /// Filter name.
    pub filter: String,
    /// Origin processes.
    pub origins: usize,
    /// Whether the edge ran.
    pub edge: bool,
    /// The edge's S.
    pub freshness_secs: u32,
    /// RSS limit per origin.
    pub rss_limit_mib: u64,
    /// RSS limit of the edge's `workerd`.
    pub edge_rss_limit_mib: u64,
    /// The workload's rates.
    pub workload: WorkloadSettings,
    /// Which faults.
    pub schedule: crate::schedule::Schedule,
    /// The known bug planted in the origins and the edge, if any.
    pub planted_bug: Option<String>,
}

/// What the report says beyond the history and the check.
pub struct RunFacts {
    /// How the run was set up.
    pub settings: RunSettings,
    /// Skipped operations: (to the origins, to the edge).
    pub skipped_ops: (u64, u64),
    /// Faults that had to be injected.
    pub required_faults: BTreeSet<FaultKind>,
    /// The evidence floors.
    pub floors: Vec<Floor>,
    /// Automatic rebuild reasons from the logs.
    pub automatic_rebuilds: Vec<String>,
    /// Harness notes.
    pub notes: Vec<String>,
    /// Log paths.
    pub logs: Vec<String>,
}

/// Builds the report.
pub fn build(history: &History, check: &CheckResult, keys: &KeySpace, facts: RunFacts) -> Report {
    let counts = OpCounts::of(history);
    let (latency_ms, errors) = latencies_and_errors(history);
    let first = history.ops.iter().map(|o| o.start).min().unwrap_or(0);
    let last = history.ops.iter().map(|o| o.end).max().unwrap_or(0);
    let (faults, missing) = fault_rows(&history.faults, &facts.required_faults);
    let observed = observed_rows(&history.faults, u64::from(facts.settings.freshness_secs) * 1_000_000);
    let mut automatic_rebuilds = BTreeMap::new();
    for reason in facts.automatic_rebuilds {
        *automatic_rebuilds.entry(reason).or_insert(0u64) += 1;
    }
    let mut rss_max_mib: BTreeMap<String, f64> = BTreeMap::new();
    for s in &history.rss {
        let max = rss_max_mib.entry(s.process.to_string()).or_insert(0.0);
        *max = max.max(s.kib as f64 / 1024.0);
    }
    let violations = check.total();
    let floors_unmet: Vec<String> = facts.floors.iter().filter(|f| !f.met).map(|f| f.name.clone()).collect();
    Report {
        passed: violations == 0 && missing.is_empty() && floors_unmet.is_empty(),
        violations,
        settings: facts.settings,
        run_secs: (last - first) as f64 / 1e6,
        edge_down: history.edge_down.clone(),
        ops_total: history.ops.len() as u64,
        ops_by_kind: counts.by_kind,
        ops_by_why: counts.by_why,
        outcomes: counts.outcomes,
        answered_by: counts.answered_by,
        skipped_ops: facts.skipped_ops,
        started_at: utc(history.started_unix_ms),
        latency_ms,
        errors,
        faults,
        faults_missing: missing,
        observed,
        fault_log: history.faults.clone(),
        automatic_rebuilds,
        rss_max_mib,
        checked: check.checked.clone(),
        floors: facts.floors,
        origin_counters: history.origin_counters.clone(),
        floors_unmet,
        excused: check.excused.iter().map(|(k, by)| (k.name().to_owned(), by.clone())).collect(),
        availability: availability_rows(check),
        ops_outside_faults: check.availability.ops_outside,
        violation_counts: check.counts.iter().map(|(k, n)| (k.name().to_owned(), *n)).collect(),
        violation_breakdown: check.breakdown.iter().map(|(k, by)| (k.name().to_owned(), by.clone())).collect(),
        examples: examples(check, keys),
        harness_notes: facts.notes,
        logs: facts.logs,
    }
}

/// The operations counted by call and target, by why they were sent, by outcome, and their
/// key answers by who answered.
struct OpCounts {
    by_kind: BTreeMap<String, u64>,
    by_why: BTreeMap<String, u64>,
    outcomes: BTreeMap<String, u64>,
    answered_by: BTreeMap<String, u64>,
}

impl OpCounts {
    fn of(history: &History) -> OpCounts {
        let mut by_kind = BTreeMap::new();
        let mut by_why = BTreeMap::new();
        let mut outcomes = BTreeMap::new();
        let mut answered_by = BTreeMap::new();
        for op in &history.ops {
            let target = match op.target {
                Target::Origin(_) => "origin",
                Target::Edge => "edge",
            };
            *by_kind.entry(format!("{} via {target}", op.kind.name())).or_insert(0u64) += 1;
            *by_why.entry(op.why.name().to_owned()).or_insert(0u64) += 1;
            let outcome = match &op.outcome {
                Outcome::Acked => "acked".to_owned(),
                Outcome::Answers(answers) => {
                    for a in answers {
                        let seen = if a.seen { "seen" } else { "not seen" };
                        *answered_by.entry(format!("{target}: {seen} by {}", a.by_name())).or_insert(0u64) += 1;
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
        OpCounts { by_kind, by_why, outcomes, answered_by }
    }
}

/// Latency (p50, p99, max in ms) by target and call; failed operations by target, status and
/// the gist of the error.
fn latencies_and_errors(history: &History) -> (BTreeMap<String, [f64; 3]>, BTreeMap<String, u64>) {
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
    (latency_ms, errors)
}

/// One row per injected fault kind that happened, and the required kinds that did not.
fn fault_rows(faults: &[Fault], required: &BTreeSet<FaultKind>) -> (Vec<FaultRow>, Vec<String>) {
    let mut rows = Vec::new();
    let mut missing = Vec::new();
    for kind in FaultKind::INJECTED {
        let of_kind: Vec<&Fault> = faults.iter().filter(|f| f.kind == kind).collect();
        if of_kind.is_empty() {
            if required.contains(&kind) {
                missing.push(kind.name().to_owned());
            }
            continue;
        }
        let repairs: Vec<bool> = of_kind.iter().filter_map(|f| f.recovered).collect();
        rows.push(FaultRow {
            fault: kind.name().to_owned(),
            injected: of_kind.len() as u64,
            seconds: of_kind.iter().map(|f| (f.end - f.start) as f64 / 1e6).sum(),
            repaired: (!repairs.is_empty())
                .then(|| format!("{}/{}", repairs.iter().filter(|r| **r).count(), repairs.len())),
            note: of_kind[0].note.clone(),
        });
    }
    (rows, missing)
}

/// The first violations of each kind, their keys spelled out.
fn examples(check: &CheckResult, keys: &KeySpace) -> Vec<Example> {
    check
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
        .collect()
}

/// Writes acknowledged per fault kind, then outside every fault.
fn availability_rows(check: &CheckResult) -> Vec<AvailabilityRow> {
    let a = &check.availability;
    let row = |during: &str, writes: Share| AvailabilityRow {
        during: during.to_owned(),
        writes,
        acknowledged: writes.ratio(),
    };
    let mut rows: Vec<AvailabilityRow> = a.writes_during.iter().map(|(kind, share)| row(kind.name(), *share)).collect();
    rows.push(row("outside every fault", a.writes_outside));
    rows
}

/// The observed stalls by kind; a window is "outside" if no injected fault's window (from its
/// start to the end of the longest time its excuses last after it) overlaps it.
fn observed_rows(faults: &[Fault], freshness: u64) -> Vec<ObservedRow> {
    let injected: Vec<&Fault> = faults.iter().filter(|f| !f.kind.is_observed()).collect();
    FaultKind::OBSERVED
        .into_iter()
        .filter_map(|kind| {
            let of_kind: Vec<&Fault> = faults.iter().filter(|f| f.kind == kind).collect();
            let longest = of_kind.iter().max_by_key(|f| f.end - f.start)?;
            let outside = of_kind
                .iter()
                .filter(|o| {
                    !injected
                        .iter()
                        .any(|f| f.start <= o.end && o.start <= f.end + excuses::longest_after(f.kind, freshness))
                })
                .count();
            Some(ObservedRow {
                fault: kind.name().to_owned(),
                windows: of_kind.len() as u64,
                seconds: of_kind.iter().map(|f| (f.end - f.start) as f64 / 1e6).sum(),
                outside_injected: outside as u64,
                note: longest.note.clone(),
            })
        })
        .collect()
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
