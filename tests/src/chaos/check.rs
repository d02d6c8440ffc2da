//! The checker: pure functions over a recorded [`History`]. No clock, no I/O: what it says
//! about a run depends only on what was recorded, and each rule has a unit test with a small
//! history that breaks it.
//!
//! The rules (DESIGN.md invariants 1, 2, 7, 8 and 9, README's failure table):
//! - **No false negatives at the origins.** A key whose write was acknowledged (the answer
//!   arrived) before a lookup *started* is answered "seen" by every origin, whoever inside it
//!   answered (filter or database) and whatever was broken at the time.
//! - **No false negatives at the edge past S.** The same for the edge, for lookups that started
//!   at least S (`FRESHNESS_SECS`) after the acknowledgement.
//! - **No "seen" for a key nobody ever tried to write.** (The origin confirms a filter "maybe"
//!   with the database; the edge forwards it.) A key whose write failed may or may not be
//!   stored: no rule applies to it.
//! - **No acknowledged write lost:** every acknowledged key is in Cassandra at the end.
//! - **Errors only where a fault allows them.** Success is 200/201, or 404 with
//!   `{"seen":false}` for a lookup. A 503 or 429 with `Retry-After` is tolerated if the
//!   operation overlaps a fault window: from the fault's start to its end plus the allowance
//!   (the time the system may take to recover after the fault is over). A 503 or 429 without
//!   `Retry-After` is always a violation, as is any other status. No answer at all (connection
//!   refused or reset, client timeout) is tolerated only from an origin inside the window of
//!   its own `kill -9`.
//! - **Never a panic** in any log, and **every origin's RSS under the limit**.
//! - **Lost bits are rebuilt on their own** (README: "rebuilds on its own when Redis lost the
//!   bits"; invariant 8 for a Redis that went back in time; a filter past its capacity is
//!   resized): such a fault is followed by a new active generation within the harness's wait. Without this rule a
//!   schedule dense enough would hide a filter that never recovers: each fault's window would
//!   cover the errors left by the one before.
//!
//! Deleted keys (their own key set) are left out of the "seen" and durability rules: after a
//! delete either answer is right.

use super::history::{AnsweredBy, FaultKind, History, Micros, Op, OpKind, Outcome, Target};
use super::keys::{KeyClass, KeyId};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap, HashSet};

/// What the checker needs besides the history.
#[derive(Clone, Copy, Debug)]
pub struct CheckSettings {
    /// The edge's freshness bound S.
    pub freshness: Micros,
    /// How long after a fault's end errors are still tolerated.
    pub allowance: Micros,
    /// Largest RSS an origin may have, in KiB.
    pub rss_limit_kib: u64,
}

/// A kind of violation: one column of the report each.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ViolationKind {
    /// An origin answered "not seen" for a key acknowledged before the lookup started.
    FalseNegativeOrigin,
    /// The edge answered "not seen" for a key acknowledged at least S before the lookup.
    FalseNegativeEdge,
    /// A key nobody tried to write was answered "seen".
    SeenNeverWritten,
    /// An acknowledged key is not in Cassandra at the end (or could not be read).
    LostWrite,
    /// A 503/429 with Retry-After outside every fault window.
    ErrorOutsideFault,
    /// A 503/429 without Retry-After.
    MissingRetryAfter,
    /// Any other unexpected status (500, 400, a 404 without `seen:false`, ...).
    BadStatus,
    /// No answer, outside a `kill -9` of the origin asked.
    TransportError,
    /// A panic in a log.
    Panic,
    /// An origin's RSS above the limit.
    RssOverLimit,
    /// A fault the origins must repair on their own (lost bits, a filter past its capacity)
    /// was not followed by a new generation within the wait.
    NotRepaired,
}

impl ViolationKind {
    /// Every kind, in the report's column order.
    pub const ALL: [ViolationKind; 11] = [
        ViolationKind::FalseNegativeOrigin,
        ViolationKind::FalseNegativeEdge,
        ViolationKind::SeenNeverWritten,
        ViolationKind::LostWrite,
        ViolationKind::ErrorOutsideFault,
        ViolationKind::MissingRetryAfter,
        ViolationKind::BadStatus,
        ViolationKind::TransportError,
        ViolationKind::Panic,
        ViolationKind::RssOverLimit,
        ViolationKind::NotRepaired,
    ];

    /// Short name (JSON and tables).
    pub fn name(self) -> &'static str {
        match self {
            ViolationKind::FalseNegativeOrigin => "false_negative_origin",
            ViolationKind::FalseNegativeEdge => "false_negative_edge",
            ViolationKind::SeenNeverWritten => "seen_never_written",
            ViolationKind::LostWrite => "lost_write",
            ViolationKind::ErrorOutsideFault => "error_outside_fault",
            ViolationKind::MissingRetryAfter => "missing_retry_after",
            ViolationKind::BadStatus => "bad_status",
            ViolationKind::TransportError => "transport_error",
            ViolationKind::Panic => "panic",
            ViolationKind::RssOverLimit => "rss_over_limit",
            ViolationKind::NotRepaired => "not_repaired",
        }
    }
}

/// One violation, with enough to find it in the history and the logs.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Violation {
    /// Which rule.
    pub kind: ViolationKind,
    /// When (the operation's start, the sample's time).
    pub at: Micros,
    /// Who answered.
    pub target: Option<Target>,
    /// The key concerned.
    pub key: Option<KeyId>,
    /// Index of the operation in `History::ops`.
    pub op: Option<usize>,
    /// What happened, in words.
    pub detail: String,
}

/// How much the rules looked at.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Checked {
    /// Operations whose outcome was checked (every workload operation).
    pub ops: u64,
    /// Key answers of lookups.
    pub answers: u64,
    /// Answers of origins that had to be "seen" (acknowledged before the lookup).
    pub must_be_seen_origin: u64,
    /// Answers of the edge that had to be "seen" (acknowledged S before the lookup).
    pub must_be_seen_edge: u64,
    /// Answers that had to be "not seen" (never written).
    pub must_not_be_seen: u64,
    /// Answers no rule constrains (acknowledged during the lookup or within S at the edge,
    /// written without acknowledgement, deleted keys).
    pub unconstrained: u64,
    /// 503/429 with Retry-After inside fault windows, and transport errors of killed origins.
    pub tolerated_errors: u64,
    /// Acknowledged keys read back from Cassandra.
    pub db_keys: u64,
    /// RSS samples.
    pub rss_samples: u64,
    /// Faults after which a repair was awaited.
    pub repairs_awaited: u64,
}

/// The checker's verdict.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CheckResult {
    /// What was checked.
    pub checked: Checked,
    /// Violations per kind (every kind present, 0 if none).
    pub counts: BTreeMap<ViolationKind, u64>,
    /// Violations per kind, broken down by what was involved (who answered, why the operation
    /// was sent, which status).
    pub breakdown: BTreeMap<ViolationKind, BTreeMap<String, u64>>,
    /// The first few violations of each kind.
    pub examples: BTreeMap<ViolationKind, Vec<Violation>>,
}

impl CheckResult {
    /// All violations.
    pub fn total(&self) -> u64 {
        self.counts.values().sum()
    }
}

/// Examples kept per kind.
pub const EXAMPLES: usize = 10;

/// Time intervals, merged; asks whether an interval overlaps any of them.
#[derive(Clone, Debug, Default)]
struct Windows(Vec<(Micros, Micros)>);

impl Windows {
    fn new(mut spans: Vec<(Micros, Micros)>) -> Windows {
        spans.sort_unstable();
        let mut merged: Vec<(Micros, Micros)> = Vec::with_capacity(spans.len());
        for (start, end) in spans {
            match merged.last_mut() {
                Some(last) if start <= last.1 => last.1 = last.1.max(end),
                _ => merged.push((start, end)),
            }
        }
        Windows(merged)
    }

    /// Whether `[start, end]` overlaps a window.
    fn overlaps(&self, start: Micros, end: Micros) -> bool {
        // The first window ending at or after `start`; it overlaps if it begins by `end`.
        let i = self.0.partition_point(|w| w.1 < start);
        self.0.get(i).is_some_and(|w| w.0 <= end)
    }
}

fn is_kill(kind: FaultKind) -> bool {
    matches!(kind, FaultKind::KillBuilderSettling | FaultKind::KillBuilderScanning | FaultKind::KillBuilderUploading)
}

struct Verdicts {
    result: CheckResult,
}

impl Verdicts {
    fn new() -> Verdicts {
        Verdicts {
            result: CheckResult {
                checked: Checked::default(),
                counts: ViolationKind::ALL.iter().map(|k| (*k, 0)).collect(),
                breakdown: BTreeMap::new(),
                examples: BTreeMap::new(),
            },
        }
    }

    fn add(&mut self, v: Violation, label: String) {
        *self.result.counts.entry(v.kind).or_default() += 1;
        *self.result.breakdown.entry(v.kind).or_default().entry(label).or_default() += 1;
        let examples = self.result.examples.entry(v.kind).or_default();
        if examples.len() < EXAMPLES {
            examples.push(v);
        }
    }
}

fn secs(t: Micros) -> String {
    format!("{:.3}s", t as f64 / 1e6)
}

/// Checks every rule over the history.
pub fn check(history: &History, settings: &CheckSettings) -> CheckResult {
    let mut v = Verdicts::new();
    let faults = Windows::new(history.faults.iter().map(|f| (f.start, f.end + settings.allowance)).collect());
    let mut down: HashMap<u8, Vec<(Micros, Micros)>> = HashMap::new();
    for f in history.faults.iter().filter(|f| is_kill(f.kind)) {
        if let Some(origin) = f.origin {
            down.entry(origin).or_default().push((f.start, f.end + settings.allowance));
        }
    }
    let down: HashMap<u8, Windows> = down.into_iter().map(|(o, spans)| (o, Windows::new(spans))).collect();

    // Who acknowledged what, when; and which keys anyone ever tried to write.
    let mut acked: HashMap<KeyId, (Micros, usize)> = HashMap::new();
    let mut attempted: HashSet<KeyId> = HashSet::new();
    for (i, op) in history.ops.iter().enumerate().filter(|(_, op)| op.kind.is_write()) {
        attempted.extend(op.keys.iter().copied());
        if op.outcome == Outcome::Acked {
            for key in &op.keys {
                let entry = acked.entry(*key).or_insert((op.end, i));
                if op.end < entry.0 {
                    *entry = (op.end, i);
                }
            }
        }
    }

    for (i, op) in history.ops.iter().enumerate() {
        v.result.checked.ops += 1;
        check_status(&mut v, i, op, &faults, &down);
        if let (true, Outcome::Answers(answers)) = (op.kind.is_lookup(), &op.outcome) {
            for (key, answer) in op.keys.iter().zip(answers) {
                check_answer(&mut v, history, settings, i, op, *key, answer.seen, answer.by, &acked, &attempted);
            }
        }
    }

    let read_back: HashMap<KeyId, Option<bool>> = history.db_checks.iter().map(|c| (c.key, c.present)).collect();
    let mut durable: Vec<(&KeyId, &(Micros, usize))> =
        acked.iter().filter(|(k, _)| k.class == KeyClass::Written).collect();
    durable.sort_unstable_by_key(|(_, (at, _))| *at);
    for (key, (at, op)) in durable {
        v.result.checked.db_keys += 1;
        let problem = match read_back.get(key) {
            Some(Some(true)) => continue,
            Some(Some(false)) => "is not in Cassandra",
            Some(None) => "could not be read from Cassandra",
            None => "was not read back from Cassandra",
        };
        let detail = format!("{key} acknowledged at {} {problem} at the end of the run", secs(*at));
        let violation = Violation {
            kind: ViolationKind::LostWrite,
            at: *at,
            target: Some(history.ops[*op].target),
            key: Some(*key),
            op: Some(*op),
            detail,
        };
        v.add(violation, problem.to_owned());
    }

    for sample in &history.rss {
        v.result.checked.rss_samples += 1;
        if sample.kib > settings.rss_limit_kib {
            let detail = format!(
                "origin-{} (pid {}) had {} MiB resident at {}, limit {} MiB",
                sample.origin,
                sample.pid,
                sample.kib / 1024,
                secs(sample.at),
                settings.rss_limit_kib / 1024
            );
            let violation = Violation {
                kind: ViolationKind::RssOverLimit,
                at: sample.at,
                target: Some(Target::Origin(sample.origin)),
                key: None,
                op: None,
                detail,
            };
            v.add(violation, format!("origin-{}", sample.origin));
        }
    }
    for fault in history.faults.iter().filter(|f| f.kind.repaired_automatically()) {
        match fault.recovered {
            None => continue,
            Some(true) => v.result.checked.repairs_awaited += 1,
            Some(false) => {
                v.result.checked.repairs_awaited += 1;
                let detail = format!(
                    "{} at {}: no new filter generation by {} ({})",
                    fault.kind.name(),
                    secs(fault.start),
                    secs(fault.end),
                    fault.note
                );
                let violation = Violation {
                    kind: ViolationKind::NotRepaired,
                    at: fault.start,
                    target: None,
                    key: None,
                    op: None,
                    detail,
                };
                v.add(violation, fault.kind.name().to_owned());
            }
        }
    }
    for line in &history.panics {
        let violation = Violation {
            kind: ViolationKind::Panic,
            at: 0,
            target: None,
            key: None,
            op: None,
            detail: format!("{}: {}", line.source, line.line),
        };
        v.add(violation, line.source.clone());
    }
    v.result
}

fn check_status(v: &mut Verdicts, i: usize, op: &Op, faults: &Windows, down: &HashMap<u8, Windows>) {
    let what = format!("{} via {} ({})", op.kind.name(), op.target, op.why.name());
    let violation = |kind, detail: String| Violation {
        kind,
        at: op.start,
        target: Some(op.target),
        key: op.keys.first().copied(),
        op: Some(i),
        detail: format!("{what} from {} to {}: {detail}", secs(op.start), secs(op.end)),
    };
    match &op.outcome {
        Outcome::Acked if op.kind.is_write() || op.kind == OpKind::Delete => {}
        Outcome::Answers(answers) if op.kind.is_lookup() && answers.len() == op.keys.len() => {}
        Outcome::Acked | Outcome::Answers(_) => {
            let detail = "an answer of the wrong shape for the call".to_owned();
            v.add(violation(ViolationKind::BadStatus, detail), "wrong shape".into());
        }
        Outcome::Status { code, retry_after, detail } if *code == 503 || *code == 429 => {
            if !retry_after {
                let d = format!("{code} without Retry-After: {detail}");
                v.add(violation(ViolationKind::MissingRetryAfter, d), format!("{code} via {}", op.target));
            } else if faults.overlaps(op.start, op.end) {
                v.result.checked.tolerated_errors += 1;
            } else {
                let d = format!("{code} outside every fault window: {detail}");
                v.add(violation(ViolationKind::ErrorOutsideFault, d), format!("{code} {}", op.kind.name()));
            }
        }
        Outcome::Status { code, detail, .. } => {
            let d = format!("status {code}: {detail}");
            v.add(violation(ViolationKind::BadStatus, d), format!("{code} {}", op.kind.name()));
        }
        Outcome::Transport { error } => {
            let killed = match op.target {
                Target::Origin(o) => down.get(&o).is_some_and(|w| w.overlaps(op.start, op.end)),
                Target::Edge => false,
            };
            if killed {
                v.result.checked.tolerated_errors += 1;
            } else {
                let d = format!("no answer: {error}");
                v.add(violation(ViolationKind::TransportError, d), op.target.to_string());
            }
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn check_answer(
    v: &mut Verdicts,
    history: &History,
    settings: &CheckSettings,
    i: usize,
    op: &Op,
    key: KeyId,
    seen: bool,
    by: AnsweredBy,
    acked: &HashMap<KeyId, (Micros, usize)>,
    attempted: &HashSet<KeyId>,
) {
    v.result.checked.answers += 1;
    if key.class == KeyClass::Deletable {
        v.result.checked.unconstrained += 1;
        return;
    }
    if !attempted.contains(&key) {
        v.result.checked.must_not_be_seen += 1;
        if seen {
            let detail = format!(
                "{} answered seen=true (by {}) at {} for {key}, which nobody ever tried to write",
                op.target,
                by.name(),
                secs(op.start)
            );
            let violation = Violation {
                kind: ViolationKind::SeenNeverWritten,
                at: op.start,
                target: Some(op.target),
                key: Some(key),
                op: Some(i),
                detail,
            };
            v.add(violation, format!("{} by {}", op.target, by.name()));
        }
        return;
    }
    let Some(&(ack, write)) = acked.get(&key) else {
        v.result.checked.unconstrained += 1;
        return;
    };
    let (deadline, kind) = match op.target {
        Target::Origin(_) => (ack, ViolationKind::FalseNegativeOrigin),
        Target::Edge => (ack + settings.freshness, ViolationKind::FalseNegativeEdge),
    };
    if deadline >= op.start {
        v.result.checked.unconstrained += 1;
        return;
    }
    match op.target {
        Target::Origin(_) => v.result.checked.must_be_seen_origin += 1,
        Target::Edge => v.result.checked.must_be_seen_edge += 1,
    }
    if !seen {
        let w = &history.ops[write];
        let detail = format!(
            "{} answered seen=false (by {}) at {} for {key}, acknowledged {:.1} ms before the lookup started ({:?} via {}, {} to {})",
            op.target,
            by.name(),
            secs(op.start),
            (op.start - ack) as f64 / 1000.0,
            w.kind,
            w.target,
            secs(w.start),
            secs(w.end),
        );
        let violation = Violation { kind, at: op.start, target: Some(op.target), key: Some(key), op: Some(i), detail };
        let label = format!("{} by {}, {}, written via {}", op.target, by.name(), op.why.name(), w.target);
        v.add(violation, label);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chaos::history::{Answer, DbCheck, Fault, LogLine, RssSample, Why};

    const S: Micros = 3_000_000;
    const SETTINGS: CheckSettings = CheckSettings { freshness: S, allowance: 1_000_000, rss_limit_kib: 512 * 1024 };

    fn op(kind: OpKind, target: Target, start: Micros, end: Micros, keys: &[KeyId], outcome: Outcome) -> Op {
        Op { kind, why: Why::Random, target, start, end, keys: keys.to_vec(), outcome }
    }

    fn write(target: Target, start: Micros, end: Micros, key: KeyId) -> Op {
        op(OpKind::Write, target, start, end, &[key], Outcome::Acked)
    }

    fn lookup(target: Target, start: Micros, key: KeyId, seen: bool) -> Op {
        let by = if target == Target::Edge { AnsweredBy::Edge } else { AnsweredBy::Filter };
        op(OpKind::Lookup, target, start, start + 1000, &[key], Outcome::Answers(vec![Answer { seen, by }]))
    }

    fn status(target: Target, start: Micros, end: Micros, code: u16, retry_after: bool) -> Op {
        let outcome = Outcome::Status { code, retry_after, detail: String::new() };
        op(OpKind::Lookup, target, start, end, &[KeyId::absent(0)], outcome)
    }

    /// A history whose writes were all read back.
    fn history(ops: Vec<Op>) -> History {
        let db_checks = ops
            .iter()
            .filter(|o| o.outcome == Outcome::Acked)
            .flat_map(|o| o.keys.iter().map(|k| DbCheck { key: *k, present: Some(true) }))
            .collect();
        History { ops, db_checks, ..History::default() }
    }

    fn fault(kind: FaultKind, start: Micros, end: Micros, origin: Option<u8>) -> Fault {
        Fault { kind, start, end, origin, recovered: None, note: String::new() }
    }

    fn count(h: &History, kind: ViolationKind) -> u64 {
        check(h, &SETTINGS).counts[&kind]
    }

    const A: Target = Target::Origin(0);
    const B: Target = Target::Origin(1);

    #[test]
    fn a_clean_history_has_no_violations_and_counts_what_it_checked() {
        let k = KeyId::written(1);
        let h = history(vec![
            write(B, 0, 10_000, k),
            lookup(A, 20_000, k, true),
            lookup(Target::Edge, 10_000 + S + 1, k, true),
            lookup(A, 30_000, KeyId::absent(1), false),
        ]);
        let result = check(&h, &SETTINGS);
        assert_eq!(result.total(), 0, "{result:?}");
        assert_eq!(result.checked.ops, 4);
        assert_eq!(result.checked.must_be_seen_origin, 1);
        assert_eq!(result.checked.must_be_seen_edge, 1);
        assert_eq!(result.checked.must_not_be_seen, 1);
        assert_eq!(result.checked.db_keys, 1);
    }

    #[test]
    fn an_origin_not_seeing_a_key_acknowledged_before_the_lookup_started_is_a_false_negative() {
        let k = KeyId::written(1);
        // Write via B acknowledged at 10 ms; lookup via A starts at 11 ms: must be seen.
        let h = history(vec![write(B, 0, 10_000, k), lookup(A, 11_000, k, false)]);
        let result = check(&h, &SETTINGS);
        assert_eq!(result.counts[&ViolationKind::FalseNegativeOrigin], 1);
        let example = &result.examples[&ViolationKind::FalseNegativeOrigin][0];
        assert_eq!(example.key, Some(k));
        assert_eq!(example.op, Some(1));
        // The database answering "no" is just as wrong as the filter doing so.
        let db_no = Outcome::Answers(vec![Answer { seen: false, by: AnsweredBy::Database }]);
        let h = history(vec![write(B, 0, 10_000, k), op(OpKind::Lookup, A, 11_000, 12_000, &[k], db_no)]);
        assert_eq!(count(&h, ViolationKind::FalseNegativeOrigin), 1);
        // A lookup that started before the acknowledgement may miss the key.
        let h = history(vec![write(B, 0, 10_000, k), lookup(A, 9_000, k, false)]);
        assert_eq!(count(&h, ViolationKind::FalseNegativeOrigin), 0);
    }

    #[test]
    fn batch_answers_are_checked_key_by_key() {
        let (k1, k2) = (KeyId::written(1), KeyId::written(2));
        let batch = op(OpKind::WriteBatch, A, 0, 10_000, &[k1, k2], Outcome::Acked);
        let answers = Outcome::Answers(vec![
            Answer { seen: true, by: AnsweredBy::Database },
            Answer { seen: false, by: AnsweredBy::Filter },
        ]);
        let read = op(OpKind::LookupBatch, B, 20_000, 30_000, &[k1, k2], answers);
        let result = check(&history(vec![batch, read]), &SETTINGS);
        assert_eq!(result.counts[&ViolationKind::FalseNegativeOrigin], 1);
        assert_eq!(result.examples[&ViolationKind::FalseNegativeOrigin][0].key, Some(k2));
    }

    #[test]
    fn the_edge_may_lag_by_s_and_no_more() {
        let k = KeyId::written(1);
        let within = history(vec![write(A, 0, 10_000, k), lookup(Target::Edge, 10_000 + S - 1, k, false)]);
        assert_eq!(count(&within, ViolationKind::FalseNegativeEdge), 0);
        let past = history(vec![write(A, 0, 10_000, k), lookup(Target::Edge, 10_000 + S + 1, k, false)]);
        assert_eq!(count(&past, ViolationKind::FalseNegativeEdge), 1);
        assert_eq!(count(&past, ViolationKind::FalseNegativeOrigin), 0);
    }

    #[test]
    fn seen_is_wrong_only_for_keys_nobody_tried_to_write() {
        let never = history(vec![lookup(A, 0, KeyId::absent(7), true)]);
        assert_eq!(count(&never, ViolationKind::SeenNeverWritten), 1);
        let never_at_edge = history(vec![lookup(Target::Edge, 0, KeyId::absent(7), true)]);
        assert_eq!(count(&never_at_edge, ViolationKind::SeenNeverWritten), 1);
        // A write that failed may have stored the key (filter first, then Cassandra).
        let k = KeyId::written(3);
        let failed = Outcome::Status { code: 503, retry_after: true, detail: String::new() };
        let tried = op(OpKind::Write, A, 0, 10_000, &[k], failed);
        let h = History {
            faults: vec![fault(FaultKind::FlushAll, 0, 10_000, None)],
            ..history(vec![tried, lookup(B, 20_000, k, true)])
        };
        assert_eq!(check(&h, &SETTINGS).total(), 0);
    }

    #[test]
    fn deleted_keys_are_left_out_of_the_seen_rules() {
        let k = KeyId::deletable(1);
        let h = history(vec![
            write(A, 0, 10_000, k),
            op(OpKind::Delete, A, 20_000, 30_000, &[k], Outcome::Acked),
            lookup(B, 40_000, k, false),
        ]);
        let result = check(&h, &SETTINGS);
        assert_eq!(result.total(), 0);
        assert_eq!(result.checked.unconstrained, 1);
        assert_eq!(result.checked.db_keys, 0, "deleted keys are not expected in Cassandra");
    }

    #[test]
    fn an_acknowledged_key_missing_from_cassandra_is_a_lost_write() {
        let (k1, k2, k3) = (KeyId::written(1), KeyId::written(2), KeyId::written(3));
        let mut h = history(vec![write(A, 0, 1, k1), write(A, 0, 1, k2), write(A, 0, 1, k3)]);
        h.db_checks = vec![DbCheck { key: k1, present: Some(true) }, DbCheck { key: k2, present: Some(false) }];
        let result = check(&h, &SETTINGS);
        assert_eq!(result.counts[&ViolationKind::LostWrite], 2, "one absent, one never read back");
        h.db_checks.push(DbCheck { key: k3, present: None });
        assert_eq!(count(&h, ViolationKind::LostWrite), 2, "unreadable counts as unverified");
    }

    #[test]
    fn unavailable_is_tolerated_only_with_retry_after_inside_a_fault_window() {
        let faults = vec![fault(FaultKind::SlowRedis, 100_000, 200_000, None)];
        let with = |ops| History { faults: faults.clone(), ..history(ops) };
        // Inside the window, and inside the allowance after it.
        let h = with(vec![status(A, 150_000, 160_000, 503, true), status(A, 1_100_000, 1_150_000, 429, true)]);
        let result = check(&h, &SETTINGS);
        assert_eq!(result.total(), 0);
        assert_eq!(result.checked.tolerated_errors, 2);
        // Overlapping the window's start counts as inside.
        assert_eq!(check(&with(vec![status(A, 50_000, 100_000, 503, true)]), &SETTINGS).total(), 0);
        // Outside.
        assert_eq!(count(&with(vec![status(A, 1_300_000, 1_400_000, 503, true)]), ViolationKind::ErrorOutsideFault), 1);
        assert_eq!(count(&with(vec![status(A, 0, 10_000, 429, true)]), ViolationKind::ErrorOutsideFault), 1);
        // Without Retry-After: always.
        assert_eq!(count(&with(vec![status(A, 150_000, 160_000, 503, false)]), ViolationKind::MissingRetryAfter), 1);
        // Any other status: always, even inside a window.
        assert_eq!(count(&with(vec![status(A, 150_000, 160_000, 500, true)]), ViolationKind::BadStatus), 1);
        assert_eq!(count(&with(vec![status(Target::Edge, 150_000, 160_000, 404, false)]), ViolationKind::BadStatus), 1);
    }

    #[test]
    fn no_answer_is_tolerated_only_from_the_killed_origin_while_it_is_down() {
        let faults = vec![fault(FaultKind::KillBuilderScanning, 100_000, 200_000, Some(1))];
        let transport = |target, start| {
            let outcome = Outcome::Transport { error: "connection refused".into() };
            op(OpKind::Lookup, target, start, start + 1000, &[KeyId::absent(0)], outcome)
        };
        let h = History {
            faults,
            ..history(vec![
                transport(B, 150_000),
                transport(A, 150_000),
                transport(Target::Edge, 150_000),
                transport(B, 5_000_000),
            ])
        };
        let result = check(&h, &SETTINGS);
        assert_eq!(result.counts[&ViolationKind::TransportError], 3);
        assert_eq!(result.checked.tolerated_errors, 1);
    }

    #[test]
    fn panics_and_memory_over_the_limit_are_violations() {
        let mut h = history(vec![]);
        h.panics.push(LogLine { source: "origin-0".into(), line: "thread 'main' panicked at src/x.rs:1:1".into() });
        h.rss.push(RssSample { origin: 0, pid: 1, at: 5, kib: 100 * 1024 });
        h.rss.push(RssSample { origin: 1, pid: 2, at: 6, kib: 600 * 1024 });
        let result = check(&h, &SETTINGS);
        assert_eq!(result.counts[&ViolationKind::Panic], 1);
        assert_eq!(result.counts[&ViolationKind::RssOverLimit], 1);
        assert_eq!(result.checked.rss_samples, 2);
    }

    #[test]
    fn a_fault_the_origins_did_not_repair_is_a_violation() {
        let mut repaired = fault(FaultKind::FlushAll, 0, 5_000_000, None);
        repaired.recovered = Some(true);
        let mut stuck = fault(FaultKind::DelSegmentBits, 10_000_000, 30_000_000, None);
        stuck.recovered = Some(false);
        // A requested rebuild that did not switch is reported, not a violation.
        let mut requested = fault(FaultKind::Rebuild, 40_000_000, 70_000_000, Some(0));
        requested.recovered = Some(false);
        let faults = vec![repaired, stuck, requested, fault(FaultKind::EdgeCut, 0, 1, None)];
        let h = History { faults, ..history(vec![]) };
        let result = check(&h, &SETTINGS);
        assert_eq!(result.counts[&ViolationKind::NotRepaired], 1);
        assert_eq!(result.checked.repairs_awaited, 2);
    }

    #[test]
    fn windows_merge_and_answer_overlaps() {
        let w = Windows::new(vec![(10, 20), (15, 30), (50, 60)]);
        assert_eq!(w.0, vec![(10, 30), (50, 60)]);
        assert!(w.overlaps(0, 10));
        assert!(w.overlaps(25, 40));
        assert!(!w.overlaps(31, 49));
        assert!(w.overlaps(60, 70));
        assert!(!w.overlaps(61, 70));
    }
}
