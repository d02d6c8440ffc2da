//! Local copies: the filters' bits held in this process, so a "no" costs no Redis round trip
//! per lookup, without weakening read-your-writes across origins.
//!
//! A lookup of a filter whose readable generation keeps an insert journal asks the copy, which
//! answers only once a catch-up round that started after the lookup arrived has applied the
//! journal up to its head (the read barrier: [`rounds`], [`held`]). One journal read serves
//! every lookup that arrived before it was sent, so under load a round trip to Redis is shared
//! by many lookups instead of paid by each.
//!
//! Copies are loaded on the first lookup of a generation (the lookup itself, and those until
//! the copy is ready, ask the store as before), within a memory budget (`local_copy_max_bytes`;
//! filters beyond it are asked in the store), and dropped when unused for [`IDLE_DROP`], when the
//! generation stops being read, or when they can no longer be caught up (the journal is gone,
//! trimmed past them, or in another store incarnation): the next lookup loads them again.

pub mod held;
#[cfg(test)]
mod leased_tests;
mod load;
#[cfg(test)]
mod load_tests;
pub mod rounds;
pub mod tail;

use crate::lease::boot_clock::{BootClock, Clock};
use crate::metrics::{CopyLoad, CopyLookup, Metrics};
use crate::read_mostly::ReadMostly;
use crate::store::{CopySource, Generation, StoreResult};
use bloomgate_filter::KeyHash;
use held::{CopyAnswer, HeldCopy};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A held copy runs a catch-up round at least this often, lookups or not: it stays well within
/// the journal's retention, and rounds wanted by lookups find few entries to apply.
pub const IDLE_CATCH_UP: Duration = Duration::from_secs(1);

/// A copy no lookup has used for this long is dropped (its memory is freed).
pub const IDLE_DROP: Duration = Duration::from_secs(600);

/// After a load failed (or the budget was full), lookups of that generation ask the store for
/// this long before a load is tried again.
pub const RETRY_LOAD_AFTER: Duration = Duration::from_secs(5);

/// What the copy table holds for a filter.
enum CopyEntry {
    /// Being loaded; the load stops when this entry is replaced (the ticket is
    /// held for its drop alone).
    Loading(Generation, #[allow(dead_code)] LoadTicket),
    /// Held, with its catch-up task running.
    Held(Arc<HeldCopy>),
    /// Not held: the load failed or did not fit the budget; tried again after the instant.
    Refused(Generation, Instant),
}

/// Held by a loading entry: dropping it (the entry was replaced, say by a newer generation of a
/// flapping filter, or removed) stops the load at once, so its bits are freed instead of being
/// read to the end and thrown away, and loads of one filter never pile up.
struct LoadTicket {
    _cancel_on_drop: tokio::sync::oneshot::Sender<()>,
}

/// The copies of this process: where their bits come from, the budget, an entry per filter.
struct CopyTable {
    store: Arc<dyn CopySource>,
    max_bytes: u64,
    entries: Mutex<HashMap<String, CopyEntry>>,
    /// The held copies of `entries`, published after every change to them: what a lookup
    /// answered under a lease reads, without the table's lock (`read_mostly`).
    held: ReadMostly<Arc<HeldCopy>>,
    metrics: Arc<Metrics>,
    /// How often a leased copy in use reads its journal (h).
    tail_every: Duration,
    clock: Arc<dyn Clock>,
}

/// The copies of this process.
#[derive(Clone)]
pub struct LocalCopies {
    shared: Arc<CopyTable>,
}

impl LocalCopies {
    /// Copies of filters in `store`, at most `max_bytes` of bits in all.
    pub fn new(store: Arc<dyn CopySource>, max_bytes: u64, metrics: Arc<Metrics>) -> LocalCopies {
        LocalCopies::with_tail(store, max_bytes, metrics, crate::lease::DEFAULT_TAIL_EVERY, Arc::new(BootClock))
    }

    /// [`LocalCopies::new`], leased copies in use reading their journals every `tail_every`,
    /// their leases timed on `clock`.
    pub fn with_tail(
        store: Arc<dyn CopySource>,
        max_bytes: u64,
        metrics: Arc<Metrics>,
        tail_every: Duration,
        clock: Arc<dyn Clock>,
    ) -> LocalCopies {
        let (entries, held) = (Mutex::default(), ReadMostly::default());
        LocalCopies { shared: Arc::new(CopyTable { store, max_bytes, entries, held, metrics, tail_every, clock }) }
    }

    /// Whether the key with `hash` may be in generation `meta` of `filter`, answered from the
    /// copy under its lease or behind its read barrier. None: no copy can answer (none held
    /// yet, or it is stale): ask the store. A store failure during the barrier is the lookup's answer too, as it
    /// would have been asking the store.
    pub async fn may_contain(&self, filter: &str, meta: Generation, hash: &KeyHash) -> Option<StoreResult<CopyAnswer>> {
        // Most lookups: the copy is held and answers at once (under its lease, or "maybe").
        let at_once =
            self.shared.held.read(filter, |copy| (copy.meta == meta).then(|| copy.answer_at_once(hash)).flatten());
        if let Some(answer) = at_once.flatten() {
            self.shared.metrics.copies.lookup(CopyLookup::Answered);
            return Some(Ok(answer));
        }
        let Some(copy) = self.held_or_load(filter, meta) else {
            self.shared.metrics.copies.lookup(CopyLookup::NotHeld);
            return None;
        };
        match copy.may_contain(hash).await {
            Ok(answer) => {
                self.shared.metrics.copies.lookup(CopyLookup::Answered);
                Some(Ok(answer))
            }
            Err(Some(unavailable)) => {
                self.shared.metrics.copies.lookup(CopyLookup::StoreFailed);
                Some(Err(unavailable))
            }
            Err(None) => {
                self.shared.metrics.copies.lookup(CopyLookup::Stale);
                if copy.is_closed() {
                    // Stale: the next lookup loads the generation again.
                    self.shared.drop_copy(filter, &copy);
                }
                None
            }
        }
    }

    /// The copy of exactly `meta` if held; otherwise starts loading it (when the budget allows
    /// and no load of it runs or recently failed).
    fn held_or_load(&self, filter: &str, meta: Generation) -> Option<Arc<HeldCopy>> {
        let mut entries = self.shared.entries.lock().unwrap_or_else(|e| e.into_inner());
        match entries.get(filter) {
            Some(CopyEntry::Held(copy)) if copy.meta == meta => return Some(copy.clone()),
            Some(CopyEntry::Loading(loading, _)) if *loading == meta => return None,
            Some(CopyEntry::Refused(refused, until)) if *refused == meta && Instant::now() < *until => return None,
            _ => {}
        }
        // Another generation's copy (replaced by a rebuild), or none: this one is wanted now.
        let others: u64 = entries
            .iter()
            .filter(|(name, _)| name.as_str() != filter)
            .map(|(_, entry)| match entry {
                CopyEntry::Held(copy) => copy.bytes(),
                CopyEntry::Loading(m, _) => m.params.total_bytes(),
                CopyEntry::Refused(..) => 0,
            })
            .sum();
        if others + meta.params.total_bytes() > self.shared.max_bytes {
            entries.insert(filter.to_owned(), CopyEntry::Refused(meta, Instant::now() + RETRY_LOAD_AFTER));
            self.shared.metrics.copies.load(CopyLoad::OverBudget);
            self.shared.changed(&entries);
            return None;
        }
        let (ticket, cancelled) = tokio::sync::oneshot::channel();
        if let Some(CopyEntry::Held(replaced)) =
            entries.insert(filter.to_owned(), CopyEntry::Loading(meta, LoadTicket { _cancel_on_drop: ticket }))
        {
            replaced.close();
        }
        self.shared.changed(&entries);
        tokio::spawn(load_and_hold(self.shared.clone(), filter.to_owned(), meta, cancelled));
        None
    }

    /// Bytes of bits held now.
    pub fn held_bytes(&self) -> u64 {
        held_bytes(&self.shared.entries.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// Bytes of bits the entries hold (loads in progress not counted: the gauge shows memory held).
fn held_bytes(entries: &HashMap<String, CopyEntry>) -> u64 {
    entries.values().map(|entry| if let CopyEntry::Held(copy) = entry { copy.bytes() } else { 0 }).sum()
}

impl CopyTable {
    /// Whether `copy` is still the one its filter's entry holds.
    fn holds(&self, filter: &str, copy: &Arc<HeldCopy>) -> bool {
        let entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        matches!(entries.get(filter), Some(CopyEntry::Held(held)) if Arc::ptr_eq(held, copy))
    }

    /// Drops `copy` from its entry (if still there) and fails every lookup waiting on it.
    fn drop_copy(&self, filter: &str, copy: &Arc<HeldCopy>) {
        copy.close();
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        if matches!(entries.get(filter), Some(CopyEntry::Held(held)) if Arc::ptr_eq(held, copy)) {
            entries.remove(filter);
        }
        self.changed(&entries);
    }

    /// After a change to `entries` (made under its lock, still held): the bytes gauge, and the
    /// held copies published for lookups.
    fn changed(&self, entries: &HashMap<String, CopyEntry>) {
        self.metrics.copies.set_bytes(held_bytes(entries));
        self.held.update(|held| {
            held.clear();
            for (filter, entry) in entries {
                if let CopyEntry::Held(copy) = entry {
                    held.insert(filter.as_str().into(), copy.clone());
                }
            }
        });
    }
}

/// Loads `meta`'s copy into `filter`'s entry, then keeps it until it is dropped. Stops as soon
/// as the entry is given to another generation (`cancelled`: its ticket was dropped).
async fn load_and_hold(
    shared: Arc<CopyTable>,
    filter: String,
    meta: Generation,
    cancelled: tokio::sync::oneshot::Receiver<()>,
) {
    let loaded = tokio::select! {
        loaded = load::load(shared.store.as_ref(), &filter, meta) => loaded,
        _ = cancelled => {
            shared.metrics.copies.load(CopyLoad::Cancelled);
            return;
        }
    };
    let copy = {
        let mut entries = shared.entries.lock().unwrap_or_else(|e| e.into_inner());
        if !matches!(entries.get(&filter), Some(CopyEntry::Loading(loading, _)) if *loading == meta) {
            return;
        }
        match loaded {
            Ok((bits, position)) => {
                let (store, metrics, clock) = (shared.store.clone(), shared.metrics.clone(), shared.clock.clone());
                let copy = Arc::new(HeldCopy::new(&filter, meta, bits, position, store, metrics, clock));
                entries.insert(filter.clone(), CopyEntry::Held(copy.clone()));
                shared.metrics.copies.load(CopyLoad::Loaded);
                shared.changed(&entries);
                copy
            }
            Err(e) => {
                tracing::warn!(filter, generation = meta.generation, cause = %e, "local copy not loaded; lookups ask the filter store");
                entries.insert(filter.clone(), CopyEntry::Refused(meta, Instant::now() + RETRY_LOAD_AFTER));
                shared.metrics.copies.load(CopyLoad::Failed);
                shared.changed(&entries);
                return;
            }
        }
    };
    tracing::debug!(filter, generation = meta.generation, bytes = copy.bytes(), "local copy loaded");
    // Lookups lead the rounds they wait for; this task keeps the lease alive, keeps an unused
    // copy current, and drops it once stale, replaced or unused for long.
    let every = shared.tail_every;
    tail::keep(shared, filter, copy, every).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::embedded::MemoryFilterStore;
    use crate::store::{FilterState, JournalRetention, LifecycleStore, WriteStore};
    use bloomgate_filter::{hash_key, Params, SizingOptions};

    pub(super) const FILTER: &str = "f";

    pub(super) async fn store_with_generation(generation: u64) -> (Arc<MemoryFilterStore>, Generation) {
        store_with_leased_generation(generation, None).await
    }

    /// A store whose filter `FILTER` has one active generation, named with `lease`.
    pub(super) async fn store_with_leased_generation(
        generation: u64,
        lease: Option<crate::lease::LeaseTerms>,
    ) -> (Arc<MemoryFilterStore>, Generation) {
        let retention = JournalRetention { max_entries: 10_000, max_age: Duration::from_secs(600) };
        let store = Arc::new(MemoryFilterStore::new(retention));
        let meta = Generation { lease, ..generation_of(&store, generation).await };
        let state = FilterState { active: Some(meta), ..FilterState::default() };
        store.replace_state(FILTER, None, state).await.unwrap();
        (store, meta)
    }

    pub(super) async fn generation_of(store: &MemoryFilterStore, generation: u64) -> Generation {
        let options = SizingOptions { seed: generation, segment_bytes: 1024 };
        let params = Params::for_capacity_with(10_000, 0.01, options).unwrap();
        let incarnation = store.incarnation().await.unwrap();
        let meta = Generation { generation, params, incarnation, journal: true, lease: None };
        store.create_generation(FILTER, meta).await.unwrap();
        meta
    }

    pub(super) fn hash(meta: Generation, key: &str) -> KeyHash {
        hash_key(key.as_bytes(), meta.params.seed)
    }

    /// Asks until the copy of `meta` answers (it loads on the first ask).
    pub(super) async fn held(copies: &LocalCopies, meta: Generation) -> Arc<HeldCopy> {
        for _ in 0..500 {
            let _ = copies.may_contain(FILTER, meta, &hash(meta, "warm-up")).await;
            let held = match copies.shared.entries.lock().unwrap().get(FILTER) {
                Some(CopyEntry::Held(copy)) if copy.meta == meta => Some(copy.clone()),
                _ => None,
            };
            if let Some(copy) = held {
                return copy;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("the copy was never loaded");
    }

    #[tokio::test]
    async fn an_add_made_elsewhere_after_the_copy_loaded_is_seen_by_the_next_lookup() {
        let (store, meta) = store_with_generation(1).await;
        store.add(FILTER, meta, vec![hash(meta, "before")]).await.unwrap();
        let copies = LocalCopies::new(store.clone(), 1 << 20, Arc::new(Metrics::default()));
        let copy = held(&copies, meta).await;
        assert!(copies.may_contain(FILTER, meta, &hash(meta, "before")).await.unwrap().unwrap().maybe);
        for i in 0..50 {
            let key = format!("after-{i}");
            // Another origin's add, acknowledged: bits and journal entry in the store.
            store.add(FILTER, meta, vec![hash(meta, &key)]).await.unwrap();
            assert!(!copy.may_contain_unguarded(&hash(meta, &key)), "negative control: the copy alone lags");
            let answer = copies.may_contain(FILTER, meta, &hash(meta, &key)).await;
            assert!(answer.unwrap().unwrap().maybe, "{key}: the barrier caught the copy up");
        }
        let absent = (0..1000).filter(|i| copies_says_no(&copy, meta, *i)).count();
        assert!(absent > 900, "the copy answers 'no' for keys never added ({absent} of 1000)");
    }

    fn copies_says_no(copy: &HeldCopy, meta: Generation, i: u32) -> bool {
        !copy.may_contain_unguarded(&hash(meta, &format!("never-{i}")))
    }

    #[tokio::test]
    async fn lookups_arriving_together_share_catch_up_rounds() {
        let (store, meta) = store_with_generation(1).await;
        let metrics = Arc::new(Metrics::default());
        let copies = LocalCopies::new(store.clone(), 1 << 20, metrics.clone());
        held(&copies, meta).await;
        let rounds_before = rounds(&metrics);
        let lookups = (0..200).map(|i| {
            let copies = copies.clone();
            async move { copies.may_contain(FILTER, meta, &hash(meta, &format!("k{i}"))).await }
        });
        let answers = futures::future::join_all(lookups).await;
        assert!(answers.iter().all(|a| matches!(a, Some(Ok(_)))));
        let used = rounds(&metrics) - rounds_before;
        assert!((1..=3).contains(&used), "200 lookups at once took {used} rounds");
    }

    fn rounds(metrics: &Metrics) -> u64 {
        let text = metrics.render();
        text.lines()
            .filter(|l| l.starts_with("bloomgate_local_copy_rounds_total{"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum()
    }

    #[tokio::test]
    async fn a_leader_gone_midway_leaves_its_waiters_to_the_store_and_later_rounds_run() {
        let (store, meta) = store_with_generation(1).await;
        let copies = LocalCopies::new(store.clone(), 1 << 20, Arc::new(Metrics::default()));
        let copy = held(&copies, meta).await;
        let (a, b) = (hash(meta, "a"), hash(meta, "b"));
        let held_reads = store.journal_read_gate.write().await;
        // Polled by hand, in this order: both take the same ticket (each yields before leading),
        // then `a` leads the round (its journal read waits on the gate) and `b` waits on it.
        let mut leader = Box::pin(copy.may_contain(&a));
        let mut waiter = Box::pin(copy.may_contain(&b));
        assert!(futures::poll!(leader.as_mut()).is_pending());
        assert!(futures::poll!(waiter.as_mut()).is_pending());
        assert!(futures::poll!(leader.as_mut()).is_pending());
        assert!(copy.round_in_flight(), "a leads a round");
        assert!(futures::poll!(waiter.as_mut()).is_pending());
        drop(leader); // its client hung up
        assert!(!copy.round_in_flight(), "the abandoned round ended when its leader went away");
        let answer = tokio::time::timeout(Duration::from_secs(5), waiter).await.expect("the waiter was released");
        assert!(matches!(answer, Err(None)), "an abandoned round sends its waiters to the store: {answer:?}");
        drop(held_reads);
        let after = copy.may_contain(&hash(meta, "c")).await;
        assert!(after.is_ok(), "the next lookup leads a round of its own: {after:?}");
        assert!(!copy.is_closed(), "an abandoned round leaves the copy held");
    }

    #[tokio::test]
    async fn a_retired_generation_is_never_answered_from_its_copy() {
        let (store, meta) = store_with_generation(1).await;
        let copies = LocalCopies::new(store.clone(), 1 << 20, Arc::new(Metrics::default()));
        held(&copies, meta).await;
        store.retire_generation(FILTER, meta).await.unwrap();
        for i in 0..20 {
            let answer = copies.may_contain(FILTER, meta, &hash(meta, &format!("k{i}"))).await;
            assert!(!matches!(answer, Some(Ok(_))), "answered from a retired generation's copy: {answer:?}");
        }
        assert_eq!(copies.held_bytes(), 0, "the stale copy is dropped");
    }

    #[tokio::test]
    async fn a_new_generation_replaces_the_copy_and_the_budget_is_kept() {
        let (store, first) = store_with_generation(1).await;
        let copies = LocalCopies::new(store.clone(), first.params.total_bytes(), Arc::new(Metrics::default()));
        let old = held(&copies, first).await;
        let second = generation_of(&store, 2).await;
        store.add(FILTER, second, vec![hash(second, "new")]).await.unwrap();
        held(&copies, second).await;
        assert!(copies.may_contain(FILTER, second, &hash(second, "new")).await.unwrap().unwrap().maybe);
        assert!(matches!(old.may_contain(&hash(first, "x")).await, Err(None)), "the replaced copy answers nothing");
        assert_eq!(copies.held_bytes(), second.params.total_bytes());

        let small = LocalCopies::new(store.clone(), first.params.total_bytes() - 1, Arc::new(Metrics::default()));
        for _ in 0..3 {
            assert!(
                small.may_contain(FILTER, first, &hash(first, "x")).await.is_none(),
                "over the budget: the store is asked"
            );
        }
        assert_eq!(small.held_bytes(), 0);
    }
}
