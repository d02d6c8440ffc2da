//! Which fault may excuse which error: the table, and the lookup of an error in it. Pure.
//!
//! An error is excused only by a fault whose documented failure behaviour produces it
//! (docs/operations.md, "Failure behaviour"; docs/edge.md; docs/design.md): the right kind of
//! fault, on the right target (the origins, the origin that was killed, the edge), for the
//! right operation, with the right status, from the fault's start until a stated time after its
//! end. Every error no row excuses is a violation. A 503 or 429 without `Retry-After`, any other
//! status, a false negative, a lost write: no row, ever.
//!
//! Each row says why, in the documents' words; a row added because the product answered
//! something the documents did not foresee says so in a comment.

use crate::history::{FaultKind, Micros, OpKind, Target};

/// The error an operation ended with, as the table names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ErrorKind {
    /// 503 with `Retry-After`.
    Unavailable,
    /// 429 with `Retry-After`.
    Overloaded,
    /// No HTTP answer: connection refused or reset, client timeout.
    NoAnswer,
}

impl ErrorKind {
    /// As the report spells it.
    pub fn name(self) -> &'static str {
        match self {
            ErrorKind::Unavailable => "503",
            ErrorKind::Overloaded => "429",
            ErrorKind::NoAnswer => "no answer",
        }
    }
}

/// Whom a row excuses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Who {
    /// Every origin.
    Origins,
    /// The origin the fault killed (the fault's `origin`).
    KilledOrigin,
    /// The edge.
    Edge,
    /// The edge, when the fault killed the origin the edge forwards to.
    EdgeOfKilledOrigin,
}

/// Which keys a lookup must ask about for a row to excuse it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Keys {
    /// Any keys at all.
    Any,
    /// At least one key the filter must answer "maybe" for, so the database is asked: a key
    /// someone tried to write; or any key while a fault that leaves the filter unable to answer
    /// overlaps the lookup (see [`filter_unavailable`]). A never-written key is otherwise ruled
    /// out by the filter, up to its false positives (see `FALSE_POSITIVE_BUDGET`).
    Maybe,
}

/// How long after the fault's end a row still excuses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct After {
    /// How long after the fault's end, in milliseconds.
    pub ms: u64,
    /// Plus the edge's freshness bound S.
    pub plus_freshness: bool,
}

const fn after(ms: u64) -> After {
    After { ms, plus_freshness: false }
}

const fn after_s_plus(ms: u64) -> After {
    After { ms, plus_freshness: true }
}

impl After {
    /// In microseconds, for a run with freshness bound `freshness`.
    pub fn micros(self, freshness: Micros) -> Micros {
        self.ms * 1000 + if self.plus_freshness { freshness } else { 0 }
    }
}

/// One row of the table.
#[derive(Clone, Copy, Debug)]
pub struct Excuse {
    /// The faults it belongs to (an observed stall beside the fault it looks like).
    pub faults: &'static [FaultKind],
    /// Which processes it excuses.
    pub who: Who,
    /// Which operations.
    pub ops: &'static [OpKind],
    /// Which error.
    pub error: ErrorKind,
    /// Which keys (lookups).
    pub keys: Keys,
    /// Until when after the fault's end.
    pub after: After,
    /// Why, from the documents.
    pub because: &'static str,
}

use FaultKind as F;
use OpKind as O;

const WRITES: &[OpKind] = &[O::Write, O::WriteBatch];
const WRITES_AND_DELETES: &[OpKind] = &[O::Write, O::WriteBatch, O::Delete];
const LOOKUPS: &[OpKind] = &[O::Lookup, O::LookupBatch];
const EVERY_OP: &[OpKind] = &[O::Write, O::WriteBatch, O::Lookup, O::LookupBatch, O::Delete];

/// Faults after which the filter holds no generation writes can reach until a rebuild names one.
const BITS_LOST: &[FaultKind] = &[
    F::RedisRestartEmpty,
    F::RedisRollback,
    F::FlushAll,
    F::FlushAfterCheckpoint,
    F::FlushDuringCheckpoint,
    F::FlushDuringReplay,
    F::DelMeta,
    F::DelJournal,
    F::RedisMasterKill,
];
const REDIS_SLOW: &[FaultKind] = &[F::SlowRedis, F::ObservedRedisStall];
const CASSANDRA_DOWN: &[FaultKind] = &[F::CassandraPause, F::ObservedCassandraStall];
const BUILDER_KILLED: &[FaultKind] = &[F::KillBuilderSettling, F::KillBuilderScanning, F::KillBuilderUploading];

/// The table. Rows are matched in any order; an error is excused if any row matches.
pub const TABLE: &[Excuse] = &[
    Excuse {
        faults: BITS_LOST,
        who: Who::Origins,
        ops: WRITES,
        error: ErrorKind::Unavailable,
        keys: Keys::Any,
        after: after(1000),
        because: "Redis flushed, restarted empty or from a snapshot, failed over, or the metadata key or the journal missing: \
                  a write waits (write_recovery_wait_ms) for the rebuild to name its generation, and is refused \
                  with 503 only if none comes by then; lookups answer from Cassandra",
    },
    Excuse {
        faults: REDIS_SLOW,
        who: Who::Origins,
        ops: WRITES,
        error: ErrorKind::Unavailable,
        keys: Keys::Any,
        after: after(1000),
        because:
            "Redis down or slow (timeout): writes 503 + Retry-After, nothing stored; lookups answer from Cassandra",
    },
    // Two seconds after: the origins' Cassandra timeout (1.5 s in these runs), for a request
    // that reached Cassandra just as it was continued and waited behind the backlog.
    Excuse {
        faults: CASSANDRA_DOWN,
        who: Who::Origins,
        ops: WRITES_AND_DELETES,
        error: ErrorKind::Unavailable,
        keys: Keys::Any,
        after: after(2000),
        because: "Cassandra down or timing out: writes (and deletes, which only Cassandra does) 503",
    },
    Excuse {
        faults: CASSANDRA_DOWN,
        who: Who::Origins,
        ops: LOOKUPS,
        error: ErrorKind::Unavailable,
        keys: Keys::Maybe,
        after: after(2000),
        because:
            "Cassandra down or timing out: keys the filter rules out 404 from the filter, others 503 + Retry-After",
    },
    Excuse {
        faults: CASSANDRA_DOWN,
        who: Who::Edge,
        ops: LOOKUPS,
        error: ErrorKind::Unavailable,
        keys: Keys::Maybe,
        after: after(2000),
        because: "the edge forwards a maybe, and a failing (5xx) origin is 503 with Retry-After at the edge",
    },
    // S after: the edge may keep a connection to its origin that the cut closed, and a fetch on
    // it fails after the heal; it has at most S (and never more than 10 s) per fetch.
    Excuse {
        faults: &[F::EdgeCut],
        who: Who::Edge,
        ops: LOOKUPS,
        error: ErrorKind::Unavailable,
        keys: Keys::Any,
        after: after_s_plus(1000),
        because: "origin unreachable: the edge answers no from its segments for at most S after its last manifest, \
                  then 503; forwards are 503",
    },
    Excuse {
        faults: BUILDER_KILLED,
        who: Who::KilledOrigin,
        ops: EVERY_OP,
        error: ErrorKind::NoAnswer,
        keys: Keys::Any,
        after: after(1000),
        because: "the origin process is gone (kill -9) until it is restarted",
    },
    Excuse {
        faults: BUILDER_KILLED,
        who: Who::EdgeOfKilledOrigin,
        ops: LOOKUPS,
        error: ErrorKind::Unavailable,
        keys: Keys::Any,
        after: after_s_plus(1000),
        because: "the edge's origin is unreachable: 503 with Retry-After, never no",
    },
    Excuse {
        faults: &[F::LookupBurst],
        who: Who::Origins,
        ops: EVERY_OP,
        error: ErrorKind::Overloaded,
        keys: Keys::Any,
        after: after(1000),
        because: "more than max_in_flight requests: 429 + Retry-After",
    },
    Excuse {
        faults: &[F::LookupBurst],
        who: Who::Edge,
        ops: LOOKUPS,
        error: ErrorKind::Overloaded,
        keys: Keys::Any,
        after: after(1000),
        because: "the edge relays the origin's 429 with its Retry-After",
    },
];

/// The table as RELIABILITY.md shows it: one line per row, then the faults that excuse nothing.
pub fn markdown() -> String {
    let mut md = String::from(
        "| fault | excuses | at | operations | until after its end | because (docs/operations.md, docs/edge.md) |\n\
         |---|---|---|---|---|---|\n",
    );
    for row in TABLE {
        let faults: Vec<&str> = row.faults.iter().map(|f| f.name()).collect();
        let ops: Vec<&str> = row.ops.iter().map(|o| o.name()).collect();
        let error = match (row.error, row.keys) {
            (ErrorKind::NoAnswer, _) => "no answer".to_owned(),
            (e, Keys::Maybe) => format!("{} + Retry-After, of a lookup asking about a \"maybe\" key", e.name()),
            (e, Keys::Any) => format!("{} + Retry-After", e.name()),
        };
        let who = match row.who {
            Who::Origins => "the origins",
            Who::KilledOrigin => "the killed origin",
            Who::Edge => "the edge",
            Who::EdgeOfKilledOrigin => "the edge, if the killed origin is the one it forwards to",
        };
        let after = match (row.after.ms, row.after.plus_freshness) {
            (ms, true) => format!("S + {} s", ms as f64 / 1000.0),
            (ms, false) => format!("{} s", ms as f64 / 1000.0),
        };
        md.push_str(&format!(
            "| {} | {error} | {who} | {} | {after} | {} |\n",
            faults.join(", "),
            ops.join(", "),
            row.because.split_whitespace().collect::<Vec<_>>().join(" ")
        ));
    }
    let silent: Vec<&str> = FaultKind::INJECTED
        .iter()
        .filter(|kind| !TABLE.iter().any(|row| row.faults.contains(kind)))
        .map(|kind| kind.name())
        .collect();
    md.push_str(&format!("| {} | nothing | - | - | - | lookups and writes go on (a lost segment: lookups it covers answer from Cassandra, writes are stored) |\n", silent.join(", ")));
    md
}

/// Faults during which the filter may be unable to answer a lookup, so a never-written key is
/// asked of the database too ("filter unavailable is never not found").
pub fn filter_unavailable(kind: FaultKind) -> bool {
    matches!(
        kind,
        F::RedisRestartEmpty
            | F::RedisRollback
            | F::FlushAll
            | F::FlushAfterCheckpoint
            | F::FlushDuringCheckpoint
            | F::FlushDuringReplay
            | F::DelMeta
            | F::DelJournal
            | F::DelSegmentBits
            | F::DelSegmentVer
            | F::RedisMasterKill
            | F::SlowRedis
            | F::ObservedRedisStall
    )
}

/// Never-written keys whose lookups a Cassandra fault may fail as false positives, beyond which
/// such failures are violations: this many, plus [`FALSE_POSITIVE_SHARE`] of the never-written
/// lookups inside those faults' windows. (The run's filter is made for a 1 % false-positive
/// rate; a resize is due at 1.1 times its capacity.)
pub const FALSE_POSITIVE_BUDGET: u64 = 2;

/// See [`FALSE_POSITIVE_BUDGET`].
pub const FALSE_POSITIVE_SHARE: f64 = 0.05;

/// Whether `kind`'s rows include a lookup 503 for "maybe" keys (the false-positive budget
/// applies inside its windows).
pub fn fails_maybes(kind: FaultKind) -> bool {
    CASSANDRA_DOWN.contains(&kind)
}

/// The longest any row of `kind` excuses after its end: where "outside every fault window"
/// begins again.
pub fn longest_after(kind: FaultKind, freshness: Micros) -> Micros {
    TABLE.iter().filter(|row| row.faults.contains(&kind)).map(|row| row.after.micros(freshness)).max().unwrap_or(0)
}

/// What the table needs to know about one failed operation.
#[derive(Clone, Copy, Debug)]
pub struct Failed {
    /// Where it was sent.
    pub target: Target,
    /// The call.
    pub kind: OpKind,
    /// How it failed.
    pub error: ErrorKind,
    /// When the operation started.
    pub start: Micros,
    /// Until when.
    pub end: Micros,
    /// Whether it asked about a key the filter must answer "maybe" for (see [`Keys::Maybe`]).
    pub maybe: bool,
}

/// One fault, as the table reads it.
#[derive(Clone, Copy, Debug)]
pub struct FaultSpan {
    /// Which fault.
    pub kind: FaultKind,
    /// When it began.
    pub start: Micros,
    /// When it ended.
    pub end: Micros,
    /// The origin it killed (or whose link it cut).
    pub origin: Option<u8>,
}

/// Whether `row` excuses `op` as a consequence of `fault`, for a run whose edge forwards to
/// `edge_origin` with freshness bound `freshness`.
pub fn excuses(row: &Excuse, fault: &FaultSpan, op: &Failed, edge_origin: u8, freshness: Micros) -> bool {
    let who = match row.who {
        Who::Origins => matches!(op.target, Target::Origin(_)),
        Who::KilledOrigin => matches!(op.target, Target::Origin(o) if fault.origin == Some(o)),
        Who::Edge => op.target == Target::Edge,
        Who::EdgeOfKilledOrigin => op.target == Target::Edge && fault.origin == Some(edge_origin),
    };
    who && row.faults.contains(&fault.kind)
        && row.ops.contains(&op.kind)
        && row.error == op.error
        && (row.keys == Keys::Any || op.maybe)
        && fault.start <= op.end
        && op.start <= fault.end + row.after.micros(freshness)
}

/// The fault that excuses `op`, if any: of those that do, an injected one before an observed
/// stall, then the one that began last (the nearest cause).
pub fn excused_by(faults: &[FaultSpan], op: &Failed, edge_origin: u8, freshness: Micros) -> Option<FaultKind> {
    faults
        .iter()
        .filter(|f| TABLE.iter().any(|row| excuses(row, f, op, edge_origin, freshness)))
        .max_by_key(|f| (!f.kind.is_observed(), f.start))
        .map(|f| f.kind)
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Micros = 3_000_000;

    fn failed(target: Target, kind: OpKind, error: ErrorKind, at: Micros, maybe: bool) -> Failed {
        Failed { target, kind, error, start: at, end: at + 1000, maybe }
    }

    fn span(kind: FaultKind, start: Micros, end: Micros, origin: Option<u8>) -> FaultSpan {
        FaultSpan { kind, start, end, origin }
    }

    fn by(fault: FaultSpan, op: Failed) -> Option<FaultKind> {
        excused_by(&[fault], &op, 0, S)
    }

    const A: Target = Target::Origin(0);
    const B: Target = Target::Origin(1);
    const E: Target = Target::Edge;
    const U: ErrorKind = ErrorKind::Unavailable;

    #[test]
    fn a_redis_that_lost_its_bits_excuses_write_503s_at_the_origins_and_no_lookup_error() {
        let kill = span(F::RedisRestartEmpty, 1_000_000, 5_000_000, None);
        assert_eq!(by(kill, failed(A, O::Write, U, 2_000_000, true)), Some(F::RedisRestartEmpty));
        assert_eq!(by(kill, failed(B, O::WriteBatch, U, 5_900_000, true)), Some(F::RedisRestartEmpty));
        assert_eq!(by(kill, failed(A, O::Write, U, 6_100_000, true)), None, "a second after its end, no more");
        for lookup in [O::Lookup, O::LookupBatch] {
            assert_eq!(by(kill, failed(A, lookup, U, 2_000_000, true)), None, "lookups fall through to Cassandra");
            assert_eq!(by(kill, failed(E, lookup, U, 2_000_000, true)), None);
        }
        assert_eq!(by(kill, failed(A, O::Delete, U, 2_000_000, true)), None, "a delete is Cassandra's");
        assert_eq!(by(kill, failed(A, O::Write, ErrorKind::Overloaded, 2_000_000, true)), None);
        assert_eq!(by(kill, failed(A, O::Write, ErrorKind::NoAnswer, 2_000_000, true)), None);
    }

    #[test]
    fn a_lost_segment_excuses_nothing() {
        for kind in [F::DelSegmentBits, F::DelSegmentVer, F::Rebuild, F::Resize, F::AutoResize, F::StaleDeletes] {
            let fault = span(kind, 0, 10_000_000, Some(0));
            for op in EVERY_OP {
                for error in [U, ErrorKind::Overloaded, ErrorKind::NoAnswer] {
                    for target in [A, B, E] {
                        assert_eq!(by(fault, failed(target, *op, error, 1_000_000, true)), None, "{kind:?} {op:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn cassandra_down_excuses_maybes_and_writes_but_not_keys_the_filter_rules_out() {
        let pause = span(F::CassandraPause, 1_000_000, 5_000_000, None);
        for target in [A, E] {
            assert_eq!(by(pause, failed(target, O::Lookup, U, 2_000_000, true)), Some(F::CassandraPause));
            assert_eq!(by(pause, failed(target, O::LookupBatch, U, 2_000_000, true)), Some(F::CassandraPause));
            assert_eq!(by(pause, failed(target, O::Lookup, U, 2_000_000, false)), None, "the filter rules it out");
        }
        assert_eq!(by(pause, failed(B, O::Delete, U, 6_900_000, true)), Some(F::CassandraPause));
        assert_eq!(by(pause, failed(B, O::Delete, U, 7_100_000, true)), None, "two seconds after, no more");
        assert_eq!(by(pause, failed(E, O::Write, U, 2_000_000, true)), None, "the edge takes no writes");
        assert_eq!(by(pause, failed(A, O::Lookup, ErrorKind::NoAnswer, 2_000_000, true)), None);
        let stall = span(F::ObservedCassandraStall, 1_000_000, 2_000_000, None);
        assert_eq!(by(stall, failed(A, O::Write, U, 1_500_000, true)), Some(F::ObservedCassandraStall));
    }

    #[test]
    fn an_edge_cut_excuses_edge_503s_for_s_after_it_and_nothing_at_the_origins() {
        let cut = span(F::EdgeCut, 1_000_000, 7_000_000, Some(0));
        assert_eq!(by(cut, failed(E, O::Lookup, U, 7_000_000 + S + 900_000, false)), Some(F::EdgeCut));
        assert_eq!(by(cut, failed(E, O::Lookup, U, 7_000_000 + S + 1_100_000, false)), None);
        assert_eq!(by(cut, failed(A, O::Lookup, U, 2_000_000, true)), None);
        assert_eq!(by(cut, failed(E, O::Lookup, ErrorKind::NoAnswer, 2_000_000, true)), None);
    }

    #[test]
    fn a_killed_builder_excuses_its_own_silence_and_the_edge_only_if_it_was_the_edges_origin() {
        let kill = span(F::KillBuilderScanning, 1_000_000, 3_000_000, Some(1));
        let none = ErrorKind::NoAnswer;
        assert_eq!(by(kill, failed(B, O::Write, none, 2_000_000, true)), Some(F::KillBuilderScanning));
        assert_eq!(by(kill, failed(A, O::Write, none, 2_000_000, true)), None, "the other origin");
        assert_eq!(by(kill, failed(E, O::Lookup, U, 2_000_000, true)), None, "the edge forwards to origin-0");
        assert_eq!(by(kill, failed(B, O::Write, U, 2_000_000, true)), None, "a 503 is not a dead process");
        let kill0 = span(F::KillBuilderSettling, 1_000_000, 3_000_000, Some(0));
        assert_eq!(by(kill0, failed(E, O::Lookup, U, 2_000_000, false)), Some(F::KillBuilderSettling));
    }

    #[test]
    fn a_burst_excuses_429s_only() {
        let burst = span(F::LookupBurst, 1_000_000, 5_000_000, None);
        let over = ErrorKind::Overloaded;
        assert_eq!(by(burst, failed(A, O::Write, over, 2_000_000, true)), Some(F::LookupBurst));
        assert_eq!(by(burst, failed(E, O::Lookup, over, 2_000_000, true)), Some(F::LookupBurst));
        assert_eq!(by(burst, failed(A, O::Lookup, U, 2_000_000, true)), None);
    }

    #[test]
    fn an_injected_fault_is_named_before_an_observed_stall_and_the_later_before_the_earlier() {
        let faults = [
            span(F::ObservedCassandraStall, 1_000_000, 9_000_000, None),
            span(F::CassandraPause, 1_000_000, 4_000_000, None),
            span(F::FlushAll, 500_000, 9_000_000, None),
        ];
        let write = failed(A, O::Write, U, 3_000_000, true);
        assert_eq!(excused_by(&faults, &write, 0, S), Some(F::CassandraPause));
        let later = [span(F::FlushAll, 500_000, 9_000_000, None), span(F::DelMeta, 2_000_000, 9_000_000, None)];
        assert_eq!(excused_by(&later, &write, 0, S), Some(F::DelMeta));
    }

    #[test]
    fn reliability_md_shows_the_table_as_the_code_has_it() {
        let doc = include_str!("../../../../RELIABILITY.md");
        assert!(doc.contains(&markdown()), "RELIABILITY.md's excuse table differs from the code's:\n{}", markdown());
    }

    #[test]
    fn every_row_says_why_and_every_fault_excusing_anything_is_a_fault() {
        for row in TABLE {
            assert!(row.because.len() > 20, "{row:?}");
            assert!(!row.faults.is_empty() && !row.ops.is_empty());
        }
        assert_eq!(longest_after(F::EdgeCut, S), S + 1_000_000);
        assert_eq!(longest_after(F::DelSegmentBits, S), 0);
    }
}
