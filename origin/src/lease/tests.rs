//! The lease arithmetic against a model of real time and clocks that drift within ±ρ.

use super::*;

const MS: u64 = 1_000_000;

fn terms(lease_ms: u64, drift_ppm: u32) -> LeaseTerms {
    LeaseTerms::new(Duration::from_millis(lease_ms), drift_ppm)
}

/// A clock running at `(10⁶ + ppm) / 10⁶` of real time, reading `offset` at real time 0: what an
/// origin's boot clock reads at real time `t` (ns).
#[derive(Clone, Copy, Debug)]
struct DriftingClock {
    ppm: i64,
    offset: u64,
}

impl DriftingClock {
    fn at(&self, real_ns: u64) -> BootInstant {
        let scaled = i128::from(real_ns) * i128::from(1_000_000 + self.ppm) / 1_000_000;
        BootInstant::from_nanos(self.offset + scaled as u64)
    }

    /// The first real time at which this clock has moved `d` past its reading at `from`.
    fn real_after(&self, from: u64, d: Duration) -> u64 {
        let start = self.at(from);
        let (mut lo, mut hi) = (from, from + 4 * d.as_nanos() as u64 + 1);
        while lo < hi {
            let mid = (lo + hi) / 2;
            if self.at(mid).saturating_since(start) >= d {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        lo
    }
}

/// Every lease that holds at a check made after the acknowledgement: (real send time of its
/// read, real check time), for a writer and a reader whose clocks run at the given rates. The add
/// answered at real time `t_r`.
fn leases_holding_after_ack(
    t: LeaseTerms,
    wait: Duration,
    writer_ppm: i64,
    reader_ppm: i64,
    t_r: u64,
) -> Vec<(u64, u64)> {
    let writer = DriftingClock { ppm: writer_ppm, offset: 7 * MS };
    let reader = DriftingClock { ppm: reader_ppm, offset: 123 * MS };
    let t_ack = writer.real_after(t_r, wait);
    let lease_ns = t.lease().as_nanos() as u64;
    let mut holding = Vec::new();
    for sent in (t_r.saturating_sub(3 * lease_ns)..t_r + lease_ns).step_by(50_000) {
        for check in (t_ack..t_ack + 2 * lease_ns).step_by(50_000) {
            if check >= sent && t.holds(reader.at(sent), reader.at(check)) {
                holding.push((sent, check));
            }
        }
    }
    holding
}

#[test]
fn a_lease_holding_after_an_acknowledgement_was_read_after_the_add_answered() {
    let t_r = 1_000 * MS;
    for (lease_ms, ppm) in [(10, 1_000), (10, 0), (3, 100_000), (25, 500)] {
        let t = terms(lease_ms, ppm);
        let p = i64::from(ppm);
        for (writer_ppm, reader_ppm) in [(p, -p), (-p, p), (0, 0), (p, p), (-p, -p), (p, 0), (0, -p)] {
            let holding = leases_holding_after_ack(t, t.writer_wait(), writer_ppm, reader_ppm, t_r);
            let early: Vec<_> = holding.iter().filter(|(sent, _)| *sent < t_r).collect();
            assert!(
                early.is_empty(),
                "L = {lease_ms} ms, ρ = {ppm} ppm, writer {writer_ppm:+} ppm, reader {reader_ppm:+} ppm: \
                 a read sent before the add answered still held a lease after the acknowledgement: {:?}",
                &early[..early.len().min(3)]
            );
            assert!(!holding.is_empty(), "reads sent after the add hold leases after it: the model is live");
        }
    }
}

#[test]
fn waiting_only_l_is_not_enough_when_the_writer_runs_fast_and_the_reader_slow() {
    // The negative control of the arithmetic: W = L, without the drift factor.
    let t = terms(10, 100_000);
    let p = i64::from(t.drift_ppm);
    let holding = leases_holding_after_ack(t, t.lease(), p, -p, 1_000 * MS);
    assert!(holding.iter().any(|(sent, _)| *sent < 1_000 * MS), "W = L lets a read from before the add hold");
    // With W the same clocks are safe.
    let holding = leases_holding_after_ack(t, t.writer_wait(), p, -p, 1_000 * MS);
    assert!(holding.iter().all(|(sent, _)| *sent >= 1_000 * MS));
}

#[test]
fn a_reader_paused_between_its_check_and_its_answer_answers_as_of_the_check() {
    let t = terms(10, 1_000);
    let sent = BootInstant::from_nanos(50 * MS);
    // The lease holds at the check (read after the lookup arrived) ...
    let check = sent.plus(Duration::from_millis(9));
    assert!(t.holds(sent, check));
    // ... and lapses as the clock runs on: a reader paused *before* reading its clock reads a
    // later `now` and goes to a barrier round instead; a lease never holds again once lapsed.
    let mut lapsed = false;
    for ms in 0..40 {
        let now = sent.plus(Duration::from_millis(ms));
        let holds = t.holds(sent, now);
        assert!(!(lapsed && holds), "a lapsed lease held again at +{ms} ms");
        lapsed |= !holds;
    }
    assert!(lapsed);
    // A reader paused *after* its check answers with the bits it read before the check: any add
    // acknowledged before the lookup arrived was in them (the test above), and an add
    // acknowledged during the pause came after the lookup arrived, concurrent with it. The
    // check's `now` is never taken before the read's send instant.
    assert!(!t.holds(sent, BootInstant::from_nanos(sent.as_nanos() - 1)), "a `now` before the send never holds");
}

#[test]
fn a_tail_read_whose_reply_is_slower_than_l_yields_no_lease() {
    let t = terms(10, 1_000);
    let sent = BootInstant::from_nanos(500 * MS);
    // The reply arrives 12 ms after the read was sent: the lease is counted from the send, so it
    // had lapsed before the entries were even applied.
    let replied = sent.plus(Duration::from_millis(12));
    assert!(!t.holds(sent, replied));
    assert!(!t.holds(sent, replied.plus(Duration::from_micros(1))));
    // A reply within L leaves what remains of L, not L from the reply.
    let quick = sent.plus(Duration::from_millis(4));
    assert!(t.holds(sent, quick.plus(Duration::from_millis(6))));
    assert!(!t.holds(sent, quick.plus(Duration::from_millis(7))));
}

#[test]
fn the_writer_waits_l_stretched_by_the_rate_bound_rounded_up() {
    assert_eq!(terms(10, 0).writer_wait(), Duration::from_millis(10));
    // 10 ms × 1.001 / 0.999 = 10.02002002… ms.
    assert_eq!(terms(10, 1_000).writer_wait(), Duration::from_nanos(10_020_021));
    assert_eq!(terms(1_000, 100_000).writer_wait(), MAX_WRITER_WAIT);
    assert!(MAX_WRITER_WAIT > Duration::from_millis(1_222) && MAX_WRITER_WAIT < Duration::from_millis(1_223));
    assert!(terms(1_000, 100_000).usable());
    assert!(!terms(1_001, 0).usable(), "longer than any origin accepts");
    assert!(!LeaseTerms { lease_us: 10_000, drift_ppm: 999_999 }.usable(), "a damaged rate bound");
}

#[test]
fn a_write_waits_once_for_the_longest_wait_after_its_last_add() {
    let at = |ms| BootInstant::from_nanos(ms * MS);
    let mut deadline = WriteDeadline::default();
    assert_eq!(deadline.at(), None, "nothing to wait for");
    deadline.add_answered(at(100), [None, None]);
    assert_eq!(deadline.at(), None, "barrier generations wait nothing");
    // A switch under way: two generations, one with a longer lease (one of them stale).
    deadline.add_answered(at(100), [Some(terms(10, 0)), Some(terms(20, 0))]);
    assert_eq!(deadline.at(), Some(at(120)));
    // A generation named since (added after the database write) answered later.
    deadline.add_answered(at(115), [Some(terms(10, 0))]);
    assert_eq!(deadline.at(), Some(at(125)));
    deadline.add_answered(at(101), [Some(terms(10, 0))]);
    assert_eq!(deadline.at(), Some(at(125)), "the deadline only moves later");
    assert!(deadline.ahead_of(at(124)) && !deadline.ahead_of(at(125)));
    deadline.add_answered(at(200), [Some(LeaseTerms { lease_us: 10_000, drift_ppm: 999_999 })]);
    assert_eq!(deadline.at(), Some(at(125)), "unusable terms are not read under, so not waited out");
}

#[test]
fn the_origin_names_generations_with_its_terms_in_lease_mode_only() {
    let on = LeaseSettings { default_mode: ReadConsistency::Lease, terms: Some(terms(10, 1_000)) };
    assert_eq!(on.terms_for(None), Some(terms(10, 1_000)));
    assert_eq!(on.terms_for(Some(ReadConsistency::Barrier)), None);
    let barrier_default = LeaseSettings { default_mode: ReadConsistency::Barrier, ..on };
    assert_eq!(barrier_default.terms_for(None), None);
    assert_eq!(barrier_default.terms_for(Some(ReadConsistency::Lease)), Some(terms(10, 1_000)));
    assert_eq!(LeaseSettings::OFF.terms_for(Some(ReadConsistency::Lease)), None, "an in-process store");
}

#[test]
fn terms_are_stored_as_two_integers() {
    let json = serde_json::to_string(&terms(10, 1_000)).unwrap();
    assert_eq!(json, r#"{"lease_us":10000,"drift_ppm":1000}"#);
    assert_eq!(serde_json::from_str::<LeaseTerms>(&json).unwrap(), terms(10, 1_000));
}

#[tokio::test]
async fn a_retirement_waits_out_the_longest_lease_of_what_it_retired() {
    let clock = boot_clock::BootClock;
    let retired_at = clock.now();
    wait_out(&clock, retired_at, [Some(terms(5, 0)), None, Some(terms(15, 0))]).await;
    assert!(clock.now().saturating_since(retired_at) >= Duration::from_millis(15));
    let quick = clock.now();
    wait_out(&clock, quick, [None]).await;
    assert!(clock.now().saturating_since(quick) < Duration::from_millis(5), "nothing to wait out");
}
