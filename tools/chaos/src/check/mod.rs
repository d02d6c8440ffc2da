//! The checker: pure functions over a recorded [`History`]. No clock, no I/O: what it says
//! about a run depends only on what was recorded, and each rule has a unit test with a small
//! history that breaks it.
//!
//! The rules (DESIGN.md invariants 1, 2, 7, 8 and 9, the failure table in docs/operations.md):
//! - **No false negatives at the origins.** A key whose write was acknowledged (the answer
//!   arrived) before a lookup *started* is answered "seen" by every origin, whoever inside it
//!   answered (filter or database) and whatever was broken at the time.
//! - **No false negatives at the edge past S.** The same for the edge, for lookups that started
//!   at least S (`FRESHNESS_SECS`) after the acknowledgement.
//! - **No "seen" for a key nobody ever tried to write.** (The origin confirms a filter "maybe"
//!   with the database; the edge forwards it.) A key whose write failed may or may not be
//!   stored: no rule applies to it.
//! - **A delete does what it says** (invariant 12). A key whose delete was acknowledged before a
//!   lookup started is answered "not seen", by the origins and the edge alike, unless some write
//!   of it may be ordered after the delete: one not acknowledged, one that had not ended when
//!   the delete was sent, or one sent after that ([`deletes`]).
//! - **No acknowledged write lost:** every acknowledged key is in Cassandra at the end.
//! - **Errors only as the excuse table allows.** Success is 200/201, or 404 with
//!   `{"seen":false}` for a lookup. A 503 or 429 with `Retry-After`, or no answer at all, is
//!   excused only by a row of the excuse table ([`excuses`]): a fault of a kind whose documented
//!   behaviour produces that error, on that target, for that operation, overlapping it (from
//!   the fault's start to a stated time after its end). A fault is one the harness injected, or
//!   a stall of Cassandra or Redis that the prober observed (see [`stalls`](crate::stalls));
//!   the latter are counted apart. The report shows what each fault kind excused. A 503 or 429
//!   without `Retry-After` is always a violation, as is any other status.
//! - **Never a panic** in any log, and **every origin's and the edge's RSS under its limit**.
//! - **The edge answers to the end.** If it refused every connection long enough for the
//!   harness to give up on it (see [`edge_watch`](super::workload::edge_watch)), that is one
//!   violation, which counts the edge operations that failed from the first refusal on (they
//!   are not transport errors each) and those not sent.
//! - **Lost bits are rebuilt on their own** (docs/design.md: "rebuilds on its own when Redis lost the
//!   bits"; invariant 8 for a Redis that went back in time; a filter past its capacity is
//!   resized): such a fault is followed by a new active generation within the harness's wait. Without this rule a
//!   schedule dense enough would hide a filter that never recovers: each fault's window would
//!   cover the errors left by the one before.
//!
//! A key is held to the "seen" and durability rules from its first acknowledged write that no
//! delete could have undone (every delete of it ended before that write started), and to "not
//! seen" after an acknowledged delete while no write of it may be ordered after that delete. In
//! between (a write racing the delete, one not acknowledged, one sent after the delete and not
//! yet acknowledged) either answer is right.
//!
//! # Layout
//! - this file: settings, verdict types, and [`check`], which applies every rule.
//! - [`excuses`]: the excuse table: which fault may excuse which error, where, for how long.
//! - [`availability`]: writes acknowledged during each kind of fault, operations outside them.
//! - [`deletes`]: which answers an acknowledged delete holds to "not seen".
//! - [`floors`]: the evidence a run must show, and their formulas.
//! - `rules`: the rules, one function each.
//! - `windows`: fault windows as the rules ask about them.
//! - `tests`: a small history that breaks each rule.

pub mod availability;
pub mod deletes;
pub mod excuses;
pub mod floors;
mod rules;
#[cfg(test)]
mod tests;
mod windows;

use crate::history::{FaultKind, History, Micros, Outcome, Target};
use crate::keys::KeyId;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};

/// What the checker needs besides the history.
#[derive(Clone, Copy, Debug)]
pub struct CheckSettings {
    /// The edge's freshness bound S.
    pub freshness: Micros,
    /// The origin the edge forwards to (an edge whose origin was killed answers 503).
    pub edge_origin: u8,
    /// Largest RSS an origin may have, in KiB.
    pub rss_limit_kib: u64,
    /// Largest RSS the edge's `workerd` may have, in KiB.
    pub edge_rss_limit_kib: u64,
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
    /// A key was answered "seen" after an acknowledged delete of it, with no write of it that
    /// could be ordered after the delete.
    DeletedButSeen,
    /// An acknowledged key is not in Cassandra at the end (or could not be read).
    LostWrite,
    /// A 503/429 with Retry-After, or no answer, that no row of the excuse table explains.
    ErrorNotExcused,
    /// A 503/429 without Retry-After.
    MissingRetryAfter,
    /// Any other unexpected status (500, 400, a 404 without `seen:false`, ...).
    BadStatus,
    /// No answer that no row of the excuse table explains (and before the edge died).
    TransportError,
    /// A panic in a log.
    Panic,
    /// An origin's or the edge's RSS above its limit.
    RssOverLimit,
    /// The edge stopped answering (every connection refused) and was given up on.
    EdgeDown,
    /// A fault the origins must repair on their own (lost bits, a filter past its capacity)
    /// was not followed by a new generation within the wait.
    NotRepaired,
}

impl ViolationKind {
    /// Every kind, in the report's column order.
    pub const ALL: [ViolationKind; 13] = [
        ViolationKind::FalseNegativeOrigin,
        ViolationKind::FalseNegativeEdge,
        ViolationKind::SeenNeverWritten,
        ViolationKind::DeletedButSeen,
        ViolationKind::LostWrite,
        ViolationKind::ErrorNotExcused,
        ViolationKind::MissingRetryAfter,
        ViolationKind::BadStatus,
        ViolationKind::TransportError,
        ViolationKind::Panic,
        ViolationKind::RssOverLimit,
        ViolationKind::NotRepaired,
        ViolationKind::EdgeDown,
    ];

    /// Short name (JSON and tables).
    pub fn name(self) -> &'static str {
        match self {
            ViolationKind::FalseNegativeOrigin => "false_negative_origin",
            ViolationKind::FalseNegativeEdge => "false_negative_edge",
            ViolationKind::SeenNeverWritten => "seen_never_written",
            ViolationKind::DeletedButSeen => "deleted_but_seen",
            ViolationKind::LostWrite => "lost_write",
            ViolationKind::ErrorNotExcused => "error_not_excused",
            ViolationKind::MissingRetryAfter => "missing_retry_after",
            ViolationKind::BadStatus => "bad_status",
            ViolationKind::TransportError => "transport_error",
            ViolationKind::Panic => "panic",
            ViolationKind::RssOverLimit => "rss_over_limit",
            ViolationKind::NotRepaired => "not_repaired",
            ViolationKind::EdgeDown => "edge_down",
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
    /// The same, per origin.
    pub must_be_seen_by_origin: BTreeMap<u8, u64>,
    /// Answers of the edge that had to be "seen" (acknowledged S before the lookup).
    pub must_be_seen_edge: u64,
    /// Of the answers that had to be "seen", those for keys deleted and written again.
    pub must_be_seen_readded: u64,
    /// Answers that had to be "not seen" (never written).
    pub must_not_be_seen: u64,
    /// Answers that had to be "not seen" because an acknowledged delete removed the key (no
    /// write of it could be ordered after the delete), at the origins and the edge.
    pub must_be_not_seen_after_delete: u64,
    /// "Not seen" answered by the edge itself, from its segments.
    pub edge_no_answers: u64,
    /// Answers no rule constrains (acknowledged during the lookup or within S at the edge,
    /// written without acknowledgement, deleted while a write of it was in flight or written
    /// again since).
    pub unconstrained: u64,
    /// Errors the excuse table excused.
    pub excused_errors: u64,
    /// Of those, excused by an observed stall (no injected fault's row).
    pub excused_in_observed_stalls: u64,
    /// Of those, 503s of never-written keys only while the database was down, within the
    /// false-positive budget.
    pub excused_as_false_positives: u64,
    /// Edge operations that failed after the edge stopped answering (part of its one
    /// `edge_down` violation).
    pub edge_down_failures: u64,
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
    /// Errors excused, per fault kind, by target, operation and status (`origin write 503`).
    pub excused: BTreeMap<FaultKind, BTreeMap<String, u64>>,
    /// Writes acknowledged during each kind of fault, and operations outside every fault.
    pub availability: availability::Availability,
}

impl CheckResult {
    /// All violations.
    pub fn total(&self) -> u64 {
        self.counts.values().sum()
    }
}

/// Examples kept per kind.
pub const EXAMPLES: usize = 10;

struct Verdicts {
    result: CheckResult,
    /// Lookups of never-written keys only that overlapped a database fault's window.
    never_written_lookups_in_database_faults: u64,
    /// Failures of such lookups no row excused: (operation, label).
    false_positive_candidates: Vec<(usize, String)>,
}

impl Verdicts {
    fn new() -> Verdicts {
        Verdicts {
            result: CheckResult {
                checked: Checked::default(),
                counts: ViolationKind::ALL.iter().map(|k| (*k, 0)).collect(),
                breakdown: BTreeMap::new(),
                examples: BTreeMap::new(),
                excused: BTreeMap::new(),
                availability: availability::Availability::default(),
            },
            never_written_lookups_in_database_faults: 0,
            false_positive_candidates: Vec::new(),
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

    fn excuse(&mut self, fault: FaultKind, label: String) {
        self.result.checked.excused_errors += 1;
        if fault.is_observed() {
            self.result.checked.excused_in_observed_stalls += 1;
        }
        *self.result.excused.entry(fault).or_default().entry(label).or_default() += 1;
    }
}

fn secs(t: Micros) -> String {
    format!("{:.3}s", t as f64 / 1e6)
}

/// Checks every rule over the history.
pub fn check(history: &History, settings: &CheckSettings) -> CheckResult {
    let mut v = Verdicts::new();
    let windows = windows::FaultWindows::new(&history.faults, settings.edge_origin, settings.freshness);
    let writes = rules::Writes::of(history);
    let deletes = deletes::Deletes::of(history);
    let cx = rules::Context { history, settings, writes: &writes, deletes: &deletes, windows: &windows };
    for (i, op) in history.ops.iter().enumerate() {
        v.result.checked.ops += 1;
        rules::status(&mut v, &cx, i, op);
        if let (true, Outcome::Answers(answers)) = (op.kind.is_lookup(), &op.outcome) {
            for (key, answer) in op.keys.iter().zip(answers) {
                rules::answer(&mut v, &cx, i, op, *key, *answer);
            }
        }
    }
    rules::false_positives(&mut v, history);
    rules::durability(&mut v, history, &writes);
    rules::memory(&mut v, history, settings);
    rules::repairs(&mut v, history);
    rules::panics(&mut v, history);
    rules::edge_down(&mut v, history);
    v.result.availability = availability::measure(history, &windows);
    v.result
}

/// The keys that must be in Cassandra at the end: those with an acknowledged write no delete
/// could have undone.
pub fn durable_keys(history: &History) -> BTreeSet<KeyId> {
    rules::Writes::of(history).acked.into_keys().collect()
}
