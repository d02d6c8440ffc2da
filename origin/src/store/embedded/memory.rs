//! The filter held in this process's memory: generations, states, journals and leases as in
//! Redis, behind the same roles, for one process only (it lives and dies with it).

use crate::build_progress::BuildProgress;
use crate::store::run_board::{RunBoard, RunPlan};
use crate::store::{
    CopySource, EdgeFeedStore, FilterState, FilterStore, FilterUnavailable, Generation, JournalPage, JournalRead,
    JournalRetention, JournalSize, LifecycleStore, LookupStore, SegmentBits, StateStore, StatsStore, StoreResult,
    WriteStore,
};
use async_trait::async_trait;
use bloomgate_filter::JournalPosition;
use bloomgate_filter::{BloomFilter, KeyHash};
use std::collections::VecDeque;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

/// One generation of an in-process filter.
struct LocalFilter {
    bits: BloomFilter,
    versions: Vec<AtomicU64>,
}

/// One generation's insert journal in process: the last entries, numbered from `first`.
#[derive(Default)]
struct LocalJournal {
    /// Position (`added`) of the first entry kept.
    first: u64,
    entries: VecDeque<(u64, Vec<KeyHash>)>,
}

impl LocalJournal {
    fn head(&self) -> JournalPosition {
        let added = self.first + self.entries.len() as u64 - 1;
        // Positions double as ids: in process they only need to be increasing.
        JournalPosition { added, id_ms: added, id_seq: 0 }
    }
}

/// The filter held in this process's memory: generations, states and leases, as in Redis.
pub struct MemoryFilterStore {
    journal: JournalRetention,
    journals: RwLock<HashMap<(String, u64), LocalJournal>>,
    /// Random per process: the filter lives and dies with it, like a Redis without persistence.
    incarnation: u64,
    generations: RwLock<HashMap<(String, u64), Arc<LocalFilter>>>,
    retired: RwLock<HashSet<(String, u64)>>,
    states: RwLock<HashMap<String, FilterState>>,
    leases: RwLock<HashMap<String, (String, std::time::Instant)>>,
    /// Rebuilds' boards of runs: shared only within this process (tests of helping builders).
    boards: RwLock<HashMap<(String, u64), RunBoard>>,
    deletes: RwLock<HashMap<(String, u64), u64>>,
    progress: RwLock<HashMap<String, BuildProgress>>,
    /// While a test holds it for writing, journal reads wait (e.g. a local copy's round in flight).
    #[cfg(test)]
    pub journal_read_gate: tokio::sync::RwLock<()>,
    /// Where a test stops a call part-way.
    #[cfg(test)]
    pub pauses: Pauses,
    /// The clock a test gives the store, in µs, for journal reads to report (as Redis reports
    /// its `TIME`); none otherwise: an in-process store's clock is the origin's own.
    #[cfg(test)]
    pub store_time_us: std::sync::atomic::AtomicU64,
}

/// A point where a call stops, once, when a test armed it: it tells `reached`, then waits for
/// `go`.
#[cfg(test)]
#[derive(Default)]
pub struct Pause {
    armed: std::sync::atomic::AtomicBool,
    /// Told when a call stops here.
    pub reached: tokio::sync::Notify,
    /// Lets the stopped call go on.
    pub go: tokio::sync::Notify,
}

#[cfg(test)]
impl Pause {
    /// The next call to pass this point stops there.
    pub fn arm(&self) {
        self.armed.store(true, Ordering::SeqCst);
    }

    async fn point(&self) {
        if self.armed.swap(false, Ordering::SeqCst) {
            self.reached.notify_one();
            self.go.notified().await;
        }
    }
}

/// The points a test may stop the store's calls at.
#[cfg(test)]
#[derive(Default)]
pub struct Pauses {
    /// After a generation's bits and journal are made, before the call returns.
    pub after_create_generation: Pause,
    /// Before the bits of unnamed generations are deleted (`delete_orphans`).
    pub before_orphan_sweep: Pause,
    /// After a rebuild's runs are posted, before the call returns.
    pub after_post_runs: Pause,
}

impl Default for MemoryFilterStore {
    fn default() -> Self {
        MemoryFilterStore::new(JournalRetention { max_entries: 100_000, max_age: std::time::Duration::from_secs(600) })
    }
}

impl MemoryFilterStore {
    /// An empty store whose journals keep `journal`'s worth of entries.
    pub fn new(journal: JournalRetention) -> MemoryFilterStore {
        MemoryFilterStore {
            journal,
            journals: RwLock::default(),
            incarnation: rand::random::<u64>() | 1,
            generations: RwLock::default(),
            retired: RwLock::default(),
            states: RwLock::default(),
            leases: RwLock::default(),
            boards: RwLock::default(),
            deletes: RwLock::default(),
            progress: RwLock::default(),
            #[cfg(test)]
            journal_read_gate: tokio::sync::RwLock::default(),
            #[cfg(test)]
            pauses: Pauses::default(),
            #[cfg(test)]
            store_time_us: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// Forgets every filter, as `FLUSHALL` does to Redis (the incarnation stays, as it does
    /// there).
    #[cfg(test)]
    pub fn flush(&self) {
        write(&self.journals).clear();
        write(&self.generations).clear();
        write(&self.retired).clear();
        write(&self.states).clear();
        write(&self.leases).clear();
        write(&self.deletes).clear();
        write(&self.progress).clear();
    }

    /// Appends the hashes of one add to its generation's journal, after its bits: see
    /// `WriteStore::add`.
    fn append_journal(&self, filter: &str, meta: Generation, hashes: Vec<KeyHash>) -> StoreResult<()> {
        self.of_this_process(meta)?;
        let key = (filter.to_owned(), meta.generation);
        if read(&self.retired).contains(&key) {
            // Retired: a harmless no-op, as the add before it was.
            return Ok(());
        }
        let mut journals = write(&self.journals);
        let Some(journal) = journals.get_mut(&key) else {
            return Err(FilterUnavailable::SegmentMissing(0));
        };
        let now = crate::clock::now_ms();
        journal.entries.push_back((now, hashes));
        let oldest_kept = now.saturating_sub(self.journal.max_age.as_millis() as u64);
        // Always keep the last entry: the head's position is read from it.
        while journal.entries.len() > 1
            && (journal.entries.len() as u64 > self.journal.max_entries
                || journal.entries.front().is_some_and(|(at, _)| *at < oldest_kept))
        {
            journal.entries.pop_front();
            journal.first += 1;
        }
        Ok(())
    }
}

fn read<T>(lock: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    lock.read().unwrap_or_else(|e| e.into_inner())
}

fn write<T>(lock: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    lock.write().unwrap_or_else(|e| e.into_inner())
}

impl MemoryFilterStore {
    /// `Incarnation` if `meta` is a generation another process made: this store's generations
    /// live in this process's memory only, so no other process's can be here.
    fn of_this_process(&self, meta: Generation) -> StoreResult<()> {
        if meta.incarnation == self.incarnation {
            Ok(())
        } else {
            Err(FilterUnavailable::Incarnation)
        }
    }

    /// The live generation `meta` names; `Incarnation` if it belongs to another process.
    fn generation(&self, filter: &str, meta: Generation) -> StoreResult<Arc<LocalFilter>> {
        self.of_this_process(meta)?;
        read(&self.generations)
            .get(&(filter.to_owned(), meta.generation))
            .cloned()
            .ok_or(FilterUnavailable::MetaMissing)
    }

    fn is_retired(&self, filter: &str, meta: Generation) -> bool {
        read(&self.retired).contains(&(filter.to_owned(), meta.generation))
    }
}

#[async_trait]
impl StateStore for MemoryFilterStore {
    async fn state(&self, filter: &str) -> StoreResult<FilterState> {
        let state = read(&self.states).get(filter).copied().ok_or(FilterUnavailable::MetaMissing);
        state.map(|s| FilterState { read_from: self.incarnation, ..s })
    }
}

#[async_trait]
impl LookupStore for MemoryFilterStore {
    async fn may_contain(&self, filter: &str, meta: Generation, hash: KeyHash) -> StoreResult<bool> {
        match self.generation(filter, meta) {
            Ok(f) => Ok(f.bits.may_contain_hash(&hash)),
            // Retired or never created: unreadable, so the lookup falls through.
            Err(FilterUnavailable::MetaMissing) => {
                Err(FilterUnavailable::SegmentMissing(meta.params.locate(&hash).segment))
            }
            Err(e) => Err(e),
        }
    }
}

#[async_trait]
impl WriteStore for MemoryFilterStore {
    async fn count_deletes(&self, filter: &str, meta: Generation, n: u64) -> StoreResult<()> {
        *write(&self.deletes).entry((filter.to_owned(), meta.generation)).or_default() += n;
        Ok(())
    }

    async fn add(&self, filter: &str, meta: Generation, hashes: Vec<KeyHash>) -> StoreResult<()> {
        match self.generation(filter, meta) {
            Ok(f) => {
                for hash in &hashes {
                    f.bits.insert_hash_shared(hash);
                    f.versions[meta.params.locate(hash).segment as usize].fetch_add(1, Ordering::SeqCst);
                }
                match meta.journal {
                    true => self.append_journal(filter, meta, hashes),
                    false => Ok(()),
                }
            }
            Err(FilterUnavailable::MetaMissing) if self.is_retired(filter, meta) => Ok(()),
            Err(e) => Err(e),
        }
    }
}

#[async_trait]
impl CopySource for MemoryFilterStore {
    async fn segment(&self, filter: &str, meta: Generation, index: u32) -> StoreResult<SegmentBits> {
        match self.generation(filter, meta) {
            Ok(f) if (index as usize) < f.versions.len() => {
                // Version first, then bits: the bits are at least as new as the label.
                let version = f.versions[index as usize].load(Ordering::SeqCst);
                Ok(SegmentBits { version, payload: f.bits.segment_payload(index) })
            }
            Err(FilterUnavailable::Incarnation) => Err(FilterUnavailable::Incarnation),
            _ => Err(FilterUnavailable::SegmentMissing(index)),
        }
    }

    async fn journal_head(&self, filter: &str, meta: Generation) -> StoreResult<JournalPosition> {
        self.of_this_process(meta)?;
        let journals = read(&self.journals);
        let head = journals.get(&(filter.to_owned(), meta.generation)).map(LocalJournal::head);
        head.ok_or(FilterUnavailable::SegmentMissing(0))
    }

    async fn catch_up_journal(&self, filter: &str, meta: Generation, page: JournalPage) -> StoreResult<JournalRead> {
        self.read_journal(filter, meta, page).await
    }
}

#[async_trait]
impl EdgeFeedStore for MemoryFilterStore {
    async fn segment_versions(&self, filter: &str, meta: Generation) -> StoreResult<Vec<u64>> {
        self.generation(filter, meta).map(|f| f.versions.iter().map(|v| v.load(Ordering::SeqCst)).collect())
    }

    async fn read_journal(&self, filter: &str, meta: Generation, page: JournalPage) -> StoreResult<JournalRead> {
        #[cfg(test)]
        let _open = self.journal_read_gate.read().await;
        let JournalPage { after, max_entries } = page;
        self.of_this_process(meta)?;
        let journals = read(&self.journals);
        let Some(journal) = journals.get(&(filter.to_owned(), meta.generation)) else {
            return Err(FilterUnavailable::SegmentMissing(0));
        };
        let head = journal.head();
        if after.added + 1 < journal.first || after.added > head.added || after.id_ms != after.added {
            return Ok(JournalRead::Reset);
        }
        let skip = (after.added + 1 - journal.first) as usize;
        let entries: Vec<Vec<KeyHash>> =
            journal.entries.iter().skip(skip).take(max_entries as usize).map(|(_, h)| h.clone()).collect();
        let to_added = after.added + entries.len() as u64;
        let to = JournalPosition { added: to_added, id_ms: to_added, id_seq: 0 };
        #[cfg(test)]
        let store_time_us = Some(self.store_time_us.load(Ordering::SeqCst)).filter(|t| *t > 0);
        #[cfg(not(test))]
        let store_time_us = None;
        Ok(JournalRead::Entries { to, entries, head: head.added, store_time_us })
    }
}

#[async_trait]
impl StatsStore for MemoryFilterStore {
    async fn deletes(&self, filter: &str, meta: Generation) -> StoreResult<u64> {
        Ok(read(&self.deletes).get(&(filter.to_owned(), meta.generation)).copied().unwrap_or(0))
    }

    async fn progress(&self, filter: &str) -> StoreResult<Option<BuildProgress>> {
        Ok(read(&self.progress).get(filter).copied())
    }

    async fn segments_intact(&self, filter: &str, meta: Generation) -> StoreResult<()> {
        let journal = !meta.journal || read(&self.journals).contains_key(&(filter.to_owned(), meta.generation));

        self.generation(filter, meta).and_then(|_| journal.then_some(()).ok_or(FilterUnavailable::SegmentMissing(0)))
    }

    async fn lease_holder(&self, filter: &str) -> StoreResult<Option<String>> {
        let now = std::time::Instant::now();
        let holder = read(&self.leases).get(filter).filter(|(_, until)| *until > now).map(|(h, _)| h.clone());
        Ok(holder)
    }

    async fn count_ones(&self, filter: &str, meta: Generation) -> StoreResult<u64> {
        self.generation(filter, meta).map(|f| f.bits.count_ones())
    }

    async fn count_ones_sampled(&self, filter: &str, meta: Generation, _max_segments: u32) -> StoreResult<(u64, u32)> {
        // In memory a full count is a scan of RAM: cheap enough to do whole.
        self.generation(filter, meta).map(|f| (f.bits.count_ones(), meta.params.segment_count))
    }

    async fn memory_bytes(&self, _filter: &str, meta: Generation) -> StoreResult<Option<u64>> {
        Ok(Some(meta.params.total_bytes()))
    }

    async fn journal_size(&self, filter: &str, meta: Generation) -> StoreResult<JournalSize> {
        let journals = read(&self.journals);
        let size = journals.get(&(filter.to_owned(), meta.generation)).map(|j| JournalSize {
            entries: j.entries.len() as u64,
            bytes: Some(j.entries.iter().map(|(_, h)| 16 * h.len() as u64 + 40).sum()),
        });
        size.ok_or(FilterUnavailable::SegmentMissing(0))
    }
}

#[async_trait]
impl LifecycleStore for MemoryFilterStore {
    async fn create_generation(&self, filter: &str, meta: Generation) -> StoreResult<()> {
        self.of_this_process(meta)?;
        let key = (filter.to_owned(), meta.generation);
        if read(&self.generations).contains_key(&key) {
            return Ok(());
        }
        // Allocated outside the lock, and fallibly: an over-large filter is an error.
        let bits = match BloomFilter::try_new(meta.params) {
            Ok(bits) => bits,
            Err(e) => return Err(FilterUnavailable::Error(e.to_string())),
        };
        let versions = (0..meta.params.segment_count).map(|_| AtomicU64::new(0)).collect();
        if meta.journal {
            // The journal starts with one (empty) entry at position 1, as in Redis.
            let journal = LocalJournal { first: 1, entries: VecDeque::from([(crate::clock::now_ms(), Vec::new())]) };
            write(&self.journals).entry(key.clone()).or_insert(journal);
        }
        write(&self.generations).entry(key).or_insert_with(|| Arc::new(LocalFilter { bits, versions }));
        #[cfg(test)]
        self.pauses.after_create_generation.point().await;
        Ok(())
    }

    async fn incarnation(&self) -> StoreResult<u64> {
        Ok(self.incarnation)
    }

    async fn replace_state(&self, filter: &str, expected: Option<u64>, state: FilterState) -> StoreResult<bool> {
        let mut states = write(&self.states);
        if states.get(filter).map(|s| s.revision) != expected {
            return Ok(false);
        }
        let state = FilterState { revision: expected.map_or(1, |r| r + 1), read_from: 0, ..state };
        states.insert(filter.to_owned(), state);
        Ok(true)
    }

    async fn merge_segment(&self, filter: &str, meta: Generation, index: u32, payload: Vec<u8>) -> StoreResult<()> {
        self.generation(filter, meta).and_then(|f| {
            // ORed in place with atomic ORs: adds landing meanwhile are kept.
            if !f.bits.merge_segment_payload_shared(index, &payload) {
                return Err(FilterUnavailable::SegmentMissing(index));
            }
            f.versions[index as usize].fetch_add(1, Ordering::SeqCst);
            Ok(())
        })
    }

    async fn set_progress(&self, filter: &str, progress: BuildProgress) -> StoreResult<()> {
        write(&self.progress).insert(filter.to_owned(), progress);
        Ok(())
    }

    async fn retire_generation(&self, filter: &str, meta: Generation) -> StoreResult<()> {
        let key = (filter.to_owned(), meta.generation);
        // Marked first, so adds that still name it succeed as no-ops; then the bits go.
        write(&self.retired).insert(key.clone());
        write(&self.journals).remove(&key);
        write(&self.generations).remove(&key);
        write(&self.deletes).remove(&key);
        Ok(())
    }

    async fn delete_orphans(&self, filter: &str, keep: Vec<u64>) -> StoreResult<u64> {
        #[cfg(test)]
        self.pauses.before_orphan_sweep.point().await;
        let mut generations = write(&self.generations);
        let before = generations.len();
        generations.retain(|(f, g), _| f != filter || keep.contains(g));
        write(&self.journals).retain(|(f, g), _| f != filter || keep.contains(g));
        Ok((before - generations.len()) as u64)
    }

    async fn clear_dropped(&self, filter: &str) -> StoreResult<u64> {
        let generations = self.delete_orphans(filter, Vec::new()).await?;
        write(&self.deletes).retain(|(f, _), _| f != filter);
        let progress = write(&self.progress).remove(filter).is_some();
        let lease = write(&self.leases).remove(filter).is_some();
        Ok(generations + u64::from(progress) + u64::from(lease))
    }

    async fn lease(&self, filter: &str, owner: &str, ttl: std::time::Duration) -> StoreResult<bool> {
        let mut leases = write(&self.leases);
        let now = std::time::Instant::now();
        let free = leases.get(filter).is_none_or(|(holder, until)| holder == owner || *until <= now);
        if free {
            leases.insert(filter.to_owned(), (owner.to_owned(), now + ttl));
        }
        Ok(free)
    }

    async fn release_lease(&self, filter: &str, owner: &str) -> StoreResult<()> {
        let mut leases = write(&self.leases);
        if leases.get(filter).is_some_and(|(holder, _)| holder == owner) {
            leases.remove(filter);
        }
        Ok(())
    }

    async fn post_runs(&self, filter: &str, generation: u64, plan: &RunPlan) -> StoreResult<()> {
        let board = RunBoard { plan: plan.clone(), done: Default::default() };
        write(&self.boards).insert((filter.to_owned(), generation), board);
        #[cfg(test)]
        self.pauses.after_post_runs.point().await;
        Ok(())
    }

    async fn run_board(&self, filter: &str, generation: u64) -> StoreResult<Option<RunBoard>> {
        Ok(read(&self.boards).get(&(filter.to_owned(), generation)).cloned())
    }

    async fn claim_run(
        &self,
        filter: &str,
        generation: u64,
        index: u32,
        owner: &str,
        ttl: std::time::Duration,
    ) -> StoreResult<bool> {
        // A claim is a lease on a name no filter can have (names hold no '/').
        self.lease(&format!("{filter}/run/{generation}/{index}"), owner, ttl).await
    }

    async fn finish_run(&self, filter: &str, generation: u64, index: u32, owner: &str, keys: u64) -> StoreResult<()> {
        if let Some(board) = write(&self.boards).get_mut(&(filter.to_owned(), generation)) {
            board.done.insert(index, keys);
        }
        self.release_lease(&format!("{filter}/run/{generation}/{index}"), owner).await
    }

    async fn withdraw_runs(&self, filter: &str, generation: u64) -> StoreResult<()> {
        write(&self.boards).remove(&(filter.to_owned(), generation));
        Ok(())
    }
}

#[async_trait]
impl FilterStore for MemoryFilterStore {
    async fn ping(&self) -> StoreResult<()> {
        Ok(())
    }
}
