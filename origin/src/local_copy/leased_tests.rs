//! A leased copy under a clock moved by hand: "no" from memory while the lease holds, a barrier
//! round once it lapses, a slow reply that yields no lease, a retirement during a live lease,
//! and a pause the clock did not count, caught against the store's clock.

use super::held::HeldCopy;
use super::tests::{hash, held, store_with_leased_generation, FILTER};
use super::LocalCopies;
use crate::lease::boot_clock::{BootInstant, ManualClock};
use crate::lease::LeaseTerms;
use crate::metrics::FilterRead;
use crate::metrics::Metrics;
use crate::store::embedded::MemoryFilterStore;
use crate::store::{Generation, LifecycleStore, WriteStore};
use std::sync::Arc;
use std::time::Duration;

const L: Duration = Duration::from_millis(10);

/// A copy of a leased generation, whose background reads never come on their own (the test
/// runs them), on a clock the test moves.
async fn leased_copy() -> (Arc<MemoryFilterStore>, Generation, Arc<HeldCopy>, Arc<ManualClock>, Arc<Metrics>) {
    let (store, meta) = store_with_leased_generation(1, Some(LeaseTerms::new(L, 1_000))).await;
    let clock = Arc::new(ManualClock::at(BootInstant::from_nanos(1_000_000_000)));
    let metrics = Arc::new(Metrics::default());
    let every = Duration::from_secs(3600);
    let copies = LocalCopies::with_tail(store.clone(), 1 << 20, metrics.clone(), every, clock.clone());
    let copy = held(&copies, meta).await;
    // Loading it, the warm-up lookups found no lease and woke a background read: let it end,
    // then let whatever lease it gave lapse.
    tokio::time::sleep(Duration::from_millis(50)).await;
    clock.advance(L * 2);
    (store, meta, copy, clock, metrics)
}

fn count(metrics: &Metrics, sample: &str) -> u64 {
    metrics.render().lines().find_map(|l| l.strip_prefix(sample)?.trim().parse().ok()).unwrap_or(0)
}

fn rounds(metrics: &Metrics) -> u64 {
    count(metrics, "bloomgate_local_copy_rounds_total{result=\"current\"}")
}

#[tokio::test]
async fn a_leased_copy_answers_no_from_memory_while_its_lease_holds_and_rounds_once_it_lapses() {
    let (store, meta, copy, clock, metrics) = leased_copy().await;
    let lapses = count(&metrics, "bloomgate_local_copy_lease_lapses_total");
    // No complete read within L: the first "no" waits for a round, which renews the lease.
    let first = copy.may_contain(&hash(meta, "absent-0")).await.unwrap();
    assert_eq!((first.maybe, first.via), (false, FilterRead::Barrier));
    // (The lapse also woke a background read: let it end.)
    tokio::time::sleep(Duration::from_millis(50)).await;
    let before = rounds(&metrics);
    for i in 1..100 {
        let answer = copy.may_contain(&hash(meta, &format!("absent-{i}"))).await.unwrap();
        assert_eq!((answer.maybe, answer.via), (false, FilterRead::Lease), "absent-{i}");
    }
    assert_eq!(rounds(&metrics), before, "99 answers under the lease, no Redis call");
    clock.advance(L);
    assert_eq!(copy.may_contain(&hash(meta, "absent-x")).await.unwrap().via, FilterRead::Lease, "L is inclusive");
    clock.advance(Duration::from_nanos(1));
    // Lapsed: a round that starts now, which sees an add made meanwhile, renews the lease.
    store.add(FILTER, meta, vec![hash(meta, "added")]).await.unwrap();
    assert!(!copy.may_contain_unguarded(&hash(meta, "added")), "negative control: the bits alone lag");
    let after = copy.may_contain(&hash(meta, "added")).await.unwrap();
    assert_eq!((after.maybe, after.via), (true, FilterRead::Barrier));
    let lapsed = count(&metrics, "bloomgate_local_copy_lease_lapses_total") - lapses;
    assert_eq!(lapsed, 2, "the first lookup and this one");
    assert_eq!(copy.may_contain(&hash(meta, "absent-y")).await.unwrap().via, FilterRead::Lease, "renewed");
    // A key whose bits are all set is "maybe" at once, lease or not.
    clock.advance(L * 3);
    assert_eq!(copy.may_contain(&hash(meta, "added")).await.unwrap().via, FilterRead::CopyMaybe);
}

#[tokio::test]
async fn the_background_read_renews_the_lease_from_when_it_was_sent() {
    let (_store, meta, copy, clock, metrics) = leased_copy().await;
    let tails = count(&metrics, "bloomgate_local_copy_tail_reads_total{result=\"current\"}");
    copy.tail().await;
    clock.advance(L / 2);
    assert_eq!(copy.may_contain(&hash(meta, "a")).await.unwrap().via, FilterRead::Lease);
    copy.tail().await;
    clock.advance(L);
    assert_eq!(copy.may_contain(&hash(meta, "b")).await.unwrap().via, FilterRead::Lease, "L from the second read");
    assert_eq!(count(&metrics, "bloomgate_local_copy_tail_reads_total{result=\"current\"}") - tails, 2);
}

#[tokio::test]
async fn a_background_read_whose_reply_is_slower_than_l_yields_no_lease() {
    let (store, meta, copy, clock, metrics) = leased_copy().await;
    let tails = count(&metrics, "bloomgate_local_copy_tail_reads_total{result=\"current\"}");
    let held_reads = store.journal_read_gate.write().await;
    let mut tail = Box::pin(copy.tail());
    assert!(futures::poll!(tail.as_mut()).is_pending(), "the read is sent, its reply held");
    clock.advance(L * 2);
    drop(held_reads);
    tail.await;
    assert_eq!(count(&metrics, "bloomgate_local_copy_tail_reads_total{result=\"current\"}") - tails, 1);
    // The read was complete, but sent 2L ago: the lookup waits for a round of its own.
    let answer = copy.may_contain(&hash(meta, "absent")).await.unwrap();
    assert_eq!((answer.maybe, answer.via), (false, FilterRead::Barrier));
}

#[tokio::test]
async fn a_retired_generation_stops_answering_under_its_lease_at_its_next_read() {
    let (store, meta, copy, _clock, _metrics) = leased_copy().await;
    copy.tail().await;
    assert_eq!(copy.may_contain(&hash(meta, "a")).await.unwrap().via, FilterRead::Lease);
    store.retire_generation(FILTER, meta).await.unwrap();
    // Until the copy reads again, its lease is as good as before: no write has skipped the
    // generation yet (whoever retired it waits the lease out before the state stops naming
    // it; see `lease`). The next read finds the journal retired, which is never complete.
    copy.tail().await;
    assert!(copy.is_closed(), "a retired journal is not a complete read: the copy is dropped");
    assert!(matches!(copy.may_contain(&hash(meta, "b")).await, Err(None)), "the store is asked instead");
}

#[tokio::test]
async fn a_lookup_that_found_the_lease_lapsed_takes_it_from_a_read_already_in_flight() {
    let (store, meta, copy, clock, metrics) = leased_copy().await;
    let held_reads = store.journal_read_gate.write().await;
    let mut tail = Box::pin(copy.tail());
    assert!(futures::poll!(tail.as_mut()).is_pending(), "a read sent now, its reply held");
    clock.advance(Duration::from_millis(1));
    let absent = hash(meta, "absent");
    let mut lookup = Box::pin(copy.may_contain(&absent));
    assert!(futures::poll!(lookup.as_mut()).is_pending(), "the lease had lapsed: it waits");
    let rounds_before = rounds(&metrics);
    drop(held_reads);
    tail.await;
    // Sent 1 ms before the lookup arrived, and complete: the lease holds again, so the lookup
    // answers from memory instead of waiting for a round of its own.
    let answer = lookup.await.unwrap();
    assert_eq!((answer.maybe, answer.via), (false, FilterRead::Lease));
    assert_eq!(rounds(&metrics) - rounds_before, 1, "the read in flight, and no other");
}

#[tokio::test]
async fn a_read_that_finds_the_clock_behind_the_stores_renews_no_lease() {
    let (store, meta, copy, clock, metrics) = leased_copy().await;
    let store_clock = |us: u64| store.store_time_us.store(us, std::sync::atomic::Ordering::SeqCst);
    store_clock(1_000_000_000_000);
    copy.tail().await;
    clock.advance(Duration::from_millis(4));
    store_clock(1_000_000_004_000);
    copy.tail().await;
    assert_eq!(copy.may_contain(&hash(meta, "a")).await.unwrap().via, FilterRead::Lease, "clocks in step");
    // The host paused the guest for 5 s: this clock saw 4 ms pass, the store's 5 s.
    clock.advance(Duration::from_millis(4));
    store_clock(1_000_005_008_000);
    let behind = count(&metrics, "bloomgate_local_copy_clock_behind_total");
    clock.advance(L * 2);
    copy.tail().await;
    assert_eq!(count(&metrics, "bloomgate_local_copy_clock_behind_total") - behind, 1, "counted");
    let answer = copy.may_contain(&hash(meta, "b")).await.unwrap();
    assert_eq!(answer.via, FilterRead::Barrier, "the read that showed the pause renewed no lease");
    // The barrier round's read, compared with the one that showed the pause, is in step again.
    let renewed = copy.may_contain(&hash(meta, "c")).await.unwrap();
    assert_eq!(renewed.via, FilterRead::Lease, "a read sent after the pause renews it");
}
