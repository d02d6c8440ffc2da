//! A small history that breaks each rule, and one that breaks none.

use super::windows::Windows;
use super::*;
use crate::history::{
    Answer, AnsweredBy, DbCheck, EdgeDown, Fault, FaultKind, LogLine, Op, OpKind, Process, RssSample, Why,
};

const S: Micros = 3_000_000;
const SETTINGS: CheckSettings =
    CheckSettings { freshness: S, edge_origin: 0, rss_limit_kib: 512 * 1024, edge_rss_limit_kib: 768 * 1024 };

fn op(kind: OpKind, target: Target, start: Micros, end: Micros, keys: &[KeyId], outcome: Outcome) -> Op {
    Op { kind, why: Why::Random, target, start, end, keys: keys.to_vec(), outcome }
}

fn write(target: Target, start: Micros, end: Micros, key: KeyId) -> Op {
    op(OpKind::Write, target, start, end, &[key], Outcome::Acked)
}

fn lookup(target: Target, start: Micros, key: KeyId, seen: bool) -> Op {
    let by = Some(if target == Target::Edge { AnsweredBy::Edge } else { AnsweredBy::Filter });
    op(OpKind::Lookup, target, start, start + 1000, &[key], Outcome::Answers(vec![Answer { seen, by }]))
}

fn status(target: Target, start: Micros, end: Micros, code: u16, retry_after: bool) -> Op {
    failed(OpKind::Lookup, target, start, end, code, retry_after)
}

fn failed(kind: OpKind, target: Target, start: Micros, end: Micros, code: u16, retry_after: bool) -> Op {
    let outcome = Outcome::Status { code, retry_after, detail: String::new() };
    op(kind, target, start, end, &[KeyId::absent(0)], outcome)
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
    Fault { kind, start, end, origin, recovered: None, note: String::new(), copy_held: None }
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
    let db_no = Outcome::Answers(vec![Answer { seen: false, by: Some(AnsweredBy::Database) }]);
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
        Answer { seen: true, by: Some(AnsweredBy::Database) },
        Answer { seen: false, by: Some(AnsweredBy::Filter) },
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
fn deleted_keys_are_left_out_of_the_seen_rules_until_written_again() {
    let k = KeyId::deletable(1);
    let delete = |start, end| op(OpKind::Delete, A, start, end, &[k], Outcome::Acked);
    let h = history(vec![write(A, 0, 10_000, k), delete(20_000, 30_000), lookup(B, 40_000, k, false)]);
    let result = check(&h, &SETTINGS);
    assert_eq!(result.total(), 0);
    assert_eq!(result.checked.must_be_not_seen_after_delete, 1, "held to the delete instead");
    assert_eq!(result.checked.unconstrained, 0);
    assert_eq!(result.checked.db_keys, 0, "deleted keys are not expected in Cassandra");
    // Written again after the delete ended: "seen" again, everywhere, and durable.
    let again = vec![
        write(A, 0, 10_000, k),
        delete(20_000, 30_000),
        write(B, 40_000, 50_000, k),
        lookup(A, 60_000, k, false),
        lookup(Target::Edge, 50_000 + S + 1, k, false),
    ];
    let result = check(&history(again.clone()), &SETTINGS);
    assert_eq!(result.counts[&ViolationKind::FalseNegativeOrigin], 1);
    assert_eq!(result.counts[&ViolationKind::FalseNegativeEdge], 1);
    assert_eq!(result.checked.must_be_seen_readded, 2);
    assert_eq!(result.checked.db_keys, 1);
    assert_eq!(durable_keys(&history(again)), [k].into());
    // A write that started before a delete ended may have been undone by it.
    let raced = history(vec![write(A, 25_000, 35_000, k), delete(20_000, 30_000), lookup(B, 40_000, k, false)]);
    assert_eq!(check(&raced, &SETTINGS).total(), 0);
}

fn delete(target: Target, start: Micros, end: Micros, key: KeyId) -> Op {
    op(OpKind::Delete, target, start, end, &[key], Outcome::Acked)
}

const C: Target = Target::Origin(2);

#[test]
fn a_key_seen_after_its_acknowledged_delete_is_a_violation() {
    let k = KeyId::deletable(1);
    // Written via A, deleted via B as soon as that was acknowledged, read via C and the edge as
    // soon as the delete was: every answer must be "not seen".
    let ops = |seen| {
        let both = Outcome::Answers(vec![Answer { seen, by: Some(AnsweredBy::Database) }; 2]);
        vec![
            write(A, 0, 10_000, k),
            delete(B, 11_000, 20_000, k),
            lookup(C, 20_100, k, seen),
            lookup(Target::Edge, 20_200, k, seen),
            op(OpKind::LookupBatch, A, 21_000, 22_000, &[k, k], both),
        ]
    };
    let result = check(&history(ops(true)), &SETTINGS);
    assert_eq!(result.counts[&ViolationKind::DeletedButSeen], 4, "origin, edge and each key of a batch");
    assert_eq!(result.total(), 4);
    assert_eq!(result.checked.must_be_not_seen_after_delete, 4);
    let example = &result.examples[&ViolationKind::DeletedButSeen][0];
    assert_eq!((example.key, example.op, example.target), (Some(k), Some(2), Some(C)));
    assert!(example.detail.contains("deleted via origin-1 (sent 0.011s, acknowledged 0.020s"), "{}", example.detail);
    assert!(example.detail.contains("0.1 ms before the lookup started"), "{}", example.detail);
    assert!(example.detail.contains("acknowledged 1.0 ms before the delete was sent"), "{}", example.detail);
    assert_eq!(result.breakdown[&ViolationKind::DeletedButSeen]["edge by edge, random, deleted via origin-1"], 1);
    // "Not seen" is what was promised: counted, no violation.
    let result = check(&history(ops(false)), &SETTINGS);
    assert_eq!((result.total(), result.checked.must_be_not_seen_after_delete), (0, 4));
    // A lookup that started before the delete's acknowledgement may still see the key.
    let early = history(vec![write(A, 0, 10_000, k), delete(B, 11_000, 20_000, k), lookup(C, 19_000, k, true)]);
    let result = check(&early, &SETTINGS);
    assert_eq!((result.total(), result.checked.must_be_not_seen_after_delete), (0, 0));
    // Of several deletes, the one sent last holds the key, though a write came before it.
    let twice = history(vec![
        write(A, 0, 10_000, k),
        delete(B, 20_000, 30_000, k),
        write(C, 40_000, 50_000, k),
        delete(A, 60_000, 70_000, k),
        lookup(B, 80_000, k, true),
    ]);
    let result = check(&twice, &SETTINGS);
    assert_eq!(result.counts[&ViolationKind::DeletedButSeen], 1);
    assert!(result.examples[&ViolationKind::DeletedButSeen][0].detail.contains("via origin-2, 0.040s to 0.050s"));
}

#[test]
fn a_write_that_may_be_ordered_after_the_delete_may_be_seen() {
    let k = KeyId::deletable(1);
    let seen_after = |writes: Vec<Op>| {
        let mut ops = writes;
        ops.extend([delete(B, 20_000, 30_000, k), lookup(C, 40_000, k, true)]);
        check(&history(ops), &SETTINGS)
    };
    // Acknowledged before the delete was sent: deleted.
    assert_eq!(seen_after(vec![write(A, 0, 10_000, k)]).counts[&ViolationKind::DeletedButSeen], 1);
    // Concurrent: acknowledged after the delete was sent (before or after its acknowledgement).
    for (start, end) in [(15_000, 20_000), (15_000, 25_000), (25_000, 35_000)] {
        let result = seen_after(vec![write(A, 0, 10_000, k), write(A, start, end, k)]);
        assert_eq!(result.total(), 0, "a write from {start} to {end}: {result:?}");
        assert_eq!(result.checked.must_be_not_seen_after_delete, 0);
    }
    // Not acknowledged, however long before the delete it was sent: it may land at any time.
    for outcome in [
        Outcome::Status { code: 503, retry_after: true, detail: String::new() },
        Outcome::Transport { error: "timed out".into() },
    ] {
        let unacked = op(OpKind::WriteBatch, A, 0, 10_000, &[k, KeyId::deletable(2)], outcome);
        let faults = vec![fault(FaultKind::CassandraPause, 0, 10_000, None)];
        let h = History { faults, ..history(vec![unacked, delete(B, 20_000, 30_000, k), lookup(C, 40_000, k, true)]) };
        let result = check(&h, &SETTINGS);
        assert_eq!(result.counts[&ViolationKind::DeletedButSeen], 0, "{result:?}");
        assert_eq!(result.checked.must_be_not_seen_after_delete, 0);
    }
    // A delete that was not acknowledged holds nothing.
    let failed_delete = op(OpKind::Delete, B, 20_000, 30_000, &[k], Outcome::Transport { error: "reset".into() });
    let h = history(vec![write(A, 0, 10_000, k), failed_delete, lookup(C, 40_000, k, true)]);
    assert_eq!(check(&h, &SETTINGS).counts[&ViolationKind::DeletedButSeen], 0);
}

#[test]
fn a_key_written_again_after_the_delete_was_acknowledged_must_be_seen() {
    let k = KeyId::deletable(1);
    let readd = |seen_before, seen_during, seen_after| {
        history(vec![
            write(A, 0, 10_000, k),
            delete(B, 10_500, 20_000, k),
            // Read before the re-put was sent: still held to the delete.
            lookup(C, 20_100, k, seen_before),
            // The re-put, sent as soon as the delete was acknowledged, read at once.
            write(A, 22_000, 30_000, k),
            lookup(B, 21_500, k, seen_during),
            lookup(B, 30_500, k, seen_after),
            lookup(Target::Edge, 30_000 + S + 1, k, seen_after),
        ])
    };
    // Seen once written again, and while the re-put was in flight: no violation.
    let result = check(&readd(false, true, true), &SETTINGS);
    assert_eq!(result.total(), 0, "{result:?}");
    assert_eq!(result.checked.must_be_not_seen_after_delete, 1);
    assert_eq!(result.checked.must_be_seen_readded, 2);
    assert_eq!(result.checked.unconstrained, 1, "the read that overlapped the re-put");
    assert_eq!(durable_keys(&readd(false, false, true)), [k].into());
    // Not seen once the re-put was acknowledged: the delete hid it, a false negative.
    let result = check(&readd(false, false, false), &SETTINGS);
    assert_eq!(result.counts[&ViolationKind::FalseNegativeOrigin], 1);
    assert_eq!(result.counts[&ViolationKind::FalseNegativeEdge], 1);
    assert_eq!(result.counts[&ViolationKind::DeletedButSeen], 0);
    // Seen before the re-put was sent: the delete did nothing.
    assert_eq!(count(&readd(true, false, true), ViolationKind::DeletedButSeen), 1);
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
fn an_error_is_excused_only_by_a_fault_whose_table_row_names_it() {
    // Redis restarted empty from 100 ms to 200 ms: writes may fail until a second after.
    let faults = vec![fault(FaultKind::RedisRestartEmpty, 100_000, 200_000, None)];
    let with = |ops| History { faults: faults.clone(), ..history(ops) };
    let writes = vec![
        failed(OpKind::Write, A, 150_000, 160_000, 503, true),
        failed(OpKind::WriteBatch, B, 1_100_000, 1_150_000, 503, true),
    ];
    let result = check(&with(writes), &SETTINGS);
    assert_eq!(result.total(), 0, "{result:?}");
    assert_eq!(result.checked.excused_errors, 2);
    assert_eq!(result.excused[&FaultKind::RedisRestartEmpty]["origin write 503"], 1);
    assert_eq!(result.excused[&FaultKind::RedisRestartEmpty]["origin write_batch 503"], 1);
    // Lookups fall through to Cassandra: a lookup's 503 inside the same window is a violation.
    assert_eq!(count(&with(vec![status(A, 150_000, 160_000, 503, true)]), ViolationKind::ErrorNotExcused), 1);
    // After the row's time, or before the fault: a violation.
    let late = failed(OpKind::Write, A, 1_300_000, 1_400_000, 503, true);
    assert_eq!(count(&with(vec![late]), ViolationKind::ErrorNotExcused), 1);
    assert_eq!(count(&with(vec![failed(OpKind::Write, A, 0, 10_000, 503, true)]), ViolationKind::ErrorNotExcused), 1);
    // A 429 is not what a Redis restart causes.
    let overloaded = failed(OpKind::Write, A, 150_000, 160_000, 429, true);
    assert_eq!(count(&with(vec![overloaded]), ViolationKind::ErrorNotExcused), 1);
    // Without Retry-After: always.
    let bare = failed(OpKind::Write, A, 150_000, 160_000, 503, false);
    assert_eq!(count(&with(vec![bare]), ViolationKind::MissingRetryAfter), 1);
    // Any other status: always, even inside a window.
    assert_eq!(count(&with(vec![failed(OpKind::Write, A, 150_000, 160_000, 500, true)]), ViolationKind::BadStatus), 1);
    assert_eq!(count(&with(vec![status(Target::Edge, 150_000, 160_000, 404, false)]), ViolationKind::BadStatus), 1);
}

#[test]
fn a_paused_database_fails_maybes_and_never_written_keys_only_within_the_false_positive_budget() {
    let faults = vec![fault(FaultKind::CassandraPause, 0, 10_000_000, None)];
    let written = KeyId::written(1);
    let maybe = |start| {
        let outcome = Outcome::Status { code: 503, retry_after: true, detail: String::new() };
        op(OpKind::Lookup, A, start, start + 1000, &[written], outcome)
    };
    let mut ops = vec![write(B, 0, 1, written), maybe(1_000_000), maybe(2_000_000)];
    // 100 lookups of never-written keys inside the pause, of which 9 failed: the budget is 2 + 5 % of 100 = 7.
    for i in 0..100 {
        let start = 3_000_000 + i * 10_000;
        ops.push(if i < 9 {
            status(A, start, start + 1000, 503, true)
        } else {
            lookup(A, start, KeyId::absent(i as u32), false)
        });
    }
    let result = check(&History { faults: faults.clone(), ..history(ops) }, &SETTINGS);
    assert_eq!(result.excused[&FaultKind::CassandraPause]["origin lookup 503"], 2);
    assert_eq!(result.checked.excused_as_false_positives, 7);
    assert_eq!(result.counts[&ViolationKind::ErrorNotExcused], 2);
    // While the filter itself could not answer (its bits lost), any key went to the database.
    let mut both = faults.clone();
    both.push(fault(FaultKind::FlushAll, 0, 10_000_000, None));
    let ops: Vec<Op> = (0..50).map(|i| status(A, i * 10_000, i * 10_000 + 1000, 503, true)).collect();
    let result = check(&History { faults: both, ..history(ops) }, &SETTINGS);
    assert_eq!(result.total(), 0, "{result:?}");
    assert_eq!(result.excused[&FaultKind::CassandraPause]["origin lookup 503"], 50);
}

#[test]
fn an_observed_stall_excuses_what_its_injected_counterpart_would_and_nothing_else() {
    // Cassandra stalled on its own from 100 ms to 200 ms (+ 2 s, as a pause).
    let faults = vec![fault(FaultKind::ObservedCassandraStall, 100_000, 200_000, None)];
    let with = |ops| History { faults: faults.clone(), ..history(ops) };
    let inside = check(
        &with(vec![
            failed(OpKind::Write, A, 150_000, 160_000, 503, true),
            failed(OpKind::Delete, B, 2_100_000, 2_150_000, 503, true),
        ]),
        &SETTINGS,
    );
    assert_eq!(inside.total(), 0, "{inside:?}");
    assert_eq!(inside.checked.excused_errors, 2);
    assert_eq!(inside.checked.excused_in_observed_stalls, 2, "counted apart from injected faults");
    // Outside it, still a violation.
    let late = failed(OpKind::Write, A, 2_300_000, 2_400_000, 503, true);
    assert_eq!(count(&with(vec![late]), ViolationKind::ErrorNotExcused), 1);
    // Without Retry-After, or another status, inside it: still a violation.
    assert_eq!(count(&with(vec![status(A, 150_000, 160_000, 503, false)]), ViolationKind::MissingRetryAfter), 1);
    assert_eq!(count(&with(vec![status(A, 150_000, 160_000, 500, true)]), ViolationKind::BadStatus), 1);
    // No answer inside it: still a violation (only an origin's own kill excuses that).
    let silent =
        op(OpKind::Lookup, A, 150_000, 160_000, &[KeyId::absent(0)], Outcome::Transport { error: "timed out".into() });
    assert_eq!(count(&with(vec![silent]), ViolationKind::TransportError), 1);
    // A false negative inside it: still a violation, at an origin and at the edge.
    let k = KeyId::written(1);
    let h = with(vec![
        write(B, 0, 10_000, k),
        lookup(A, 150_000, k, false),
        lookup(Target::Edge, 10_000 + S + 1, k, false),
    ]);
    let h = History { faults: vec![fault(FaultKind::ObservedRedisStall, 0, 10_000_000, None)], ..h };
    let result = check(&h, &SETTINGS);
    assert_eq!(result.counts[&ViolationKind::FalseNegativeOrigin], 1);
    assert_eq!(result.counts[&ViolationKind::FalseNegativeEdge], 1);
    // An injected fault's window is not counted as an observed one.
    let both = vec![fault(FaultKind::CassandraPause, 100_000, 200_000, None), faults[0].clone()];
    let h = History { faults: both, ..history(vec![failed(OpKind::Write, A, 150_000, 160_000, 503, true)]) };
    assert_eq!(check(&h, &SETTINGS).checked.excused_in_observed_stalls, 0);
}

#[test]
fn writes_acknowledged_are_measured_per_fault_and_outside_every_fault() {
    let k = |n| KeyId::written(n);
    let faults = vec![fault(FaultKind::FlushAll, 1_000_000, 2_000_000, None)];
    let ops = vec![
        write(A, 1_500_000, 1_600_000, k(1)),
        failed(OpKind::Write, A, 1_700_000, 1_800_000, 503, true),
        write(A, 9_000_000, 9_100_000, k(2)),
        lookup(B, 9_200_000, k(2), true),
    ];
    let result = check(&History { faults, ..history(ops) }, &SETTINGS);
    let a = &result.availability;
    assert_eq!((a.writes_during[&FaultKind::FlushAll].total, a.writes_during[&FaultKind::FlushAll].ok), (2, 1));
    assert_eq!((a.writes_outside.total, a.writes_outside.ok), (1, 1));
    assert_eq!((a.ops_outside.total, a.ops_outside.ok), (2, 2));
}

#[test]
fn a_dead_edge_is_one_violation_that_counts_what_it_cost() {
    let transport = |target, start| {
        let outcome = Outcome::Transport { error: "ConnectionRefused".into() };
        op(OpKind::Lookup, target, start, start + 1000, &[KeyId::absent(0)], outcome)
    };
    let ops = vec![
        transport(Target::Edge, 1_000_000), // before the run of refusals: a transport error
        transport(Target::Edge, 10_000_000),
        transport(Target::Edge, 12_000_000),
        transport(Target::Edge, 15_500_000),
        transport(A, 12_000_000), // an origin's are not the edge's
    ];
    let down = EdgeDown { refused_since: 10_000_000, at: 15_000_000, not_sent: 140_000, note: "V8 fatal error".into() };
    let h = History { edge_down: Some(down), ..history(ops) };
    let result = check(&h, &SETTINGS);
    assert_eq!(result.counts[&ViolationKind::EdgeDown], 1);
    assert_eq!(result.counts[&ViolationKind::TransportError], 2);
    assert_eq!(result.checked.edge_down_failures, 3);
    let detail = &result.examples[&ViolationKind::EdgeDown][0].detail;
    assert!(detail.contains("3 edge operations failed") && detail.contains("140000 were not sent"), "{detail}");
    assert!(detail.contains("V8 fatal error"), "{detail}");
}

#[test]
fn no_answer_is_excused_only_from_the_killed_origin_while_it_is_down() {
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
    assert_eq!(result.checked.excused_errors, 1);
    assert_eq!(result.excused[&FaultKind::KillBuilderScanning]["origin lookup no answer"], 1);
}

#[test]
fn panics_and_memory_over_the_limit_are_violations() {
    let mut h = history(vec![]);
    h.panics.push(LogLine { source: "origin-0".into(), line: "thread 'main' panicked at src/x.rs:1:1".into() });
    h.rss.push(RssSample { process: Process::Origin(0), pid: 1, at: 5, kib: 100 * 1024 });
    h.rss.push(RssSample { process: Process::Origin(1), pid: 2, at: 6, kib: 600 * 1024 });
    // The edge's processes have a limit of their own.
    h.rss.push(RssSample { process: Process::EdgeWorker, pid: 3, at: 7, kib: 600 * 1024 });
    h.rss.push(RssSample { process: Process::EdgeProxy, pid: 4, at: 8, kib: 800 * 1024 });
    let result = check(&h, &SETTINGS);
    assert_eq!(result.counts[&ViolationKind::Panic], 1);
    assert_eq!(result.counts[&ViolationKind::RssOverLimit], 2);
    assert_eq!(result.breakdown[&ViolationKind::RssOverLimit]["edge proxy workerd"], 1);
    assert!(result.examples[&ViolationKind::RssOverLimit][1].detail.contains("edge proxy workerd (pid 4) had 800 MiB"));
    assert_eq!(result.checked.rss_samples, 4);
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
