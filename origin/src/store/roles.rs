//! The filter store's roles: one trait per path that calls it, so a reader sees which path
//! touches what, and each caller holds only the role it needs. A store implements them all,
//! [`FilterStore`] names the whole, and [`FilterStoreRoles`] hands one store out by role (the gate's
//! paths call `store.lookup`, `store.write`, ...; local copies hold a [`CopySource`]).
//!
//! | role | callers |
//! | --- | --- |
//! | [`StateStore`] | every path: which generations a filter has |
//! | [`LookupStore`] | `gate::lookup` |
//! | [`WriteStore`] | `gate::write` |
//! | [`CopySource`] | `local_copy` |
//! | [`EdgeFeedStore`] | `gate::edge_feed` |
//! | [`StatsStore`] | `gate::stats`, `recovery` |
//! | [`LifecycleStore`] | `gate::filters`, `rebuild` |
//! | [`FilterStore`] | the wiring, health checks, and what hands the roles out |
//!
//! Every method taking a `meta` fails with `Incarnation` if the store process answering is
//! not the one that holds `meta`'s bits.

use super::run_board::{RunBoard, RunPlan};
use super::{FilterState, Generation, JournalPage, JournalRead, JournalSize, SegmentBits, StoreResult};
use super::{FilterUnavailable, SealedRead};
use crate::build_progress::BuildProgress;
use crate::lease::boot_clock::{BootClock, Clock};
use async_trait::async_trait;
use bloomgate_filter::{JournalPosition, KeyHash};
use std::sync::Arc;
/// Reading a filter's state (which generations it has): where every path starts.
#[async_trait]
pub trait StateStore: Send + Sync + 'static {
    /// The filter's generations, with `read_from` set to the incarnation of the store process
    /// that answered; `MetaMissing` if the filter store has no record of the filter.
    async fn state(&self, filter: &str) -> StoreResult<FilterState>;
    /// [`state`](StateStore::state) for the write path and admin reads (stats): under the write
    /// timeout, since a write must not fail because lookups' short timeout expired behind
    /// other writes' scripts.
    async fn state_for_write(&self, filter: &str) -> StoreResult<FilterState> {
        self.state(filter).await
    }
}

/// What a lookup asks of the filter store: the readable generation (from the state) and its
/// bits at one key.
#[async_trait]
pub trait LookupStore: StateStore {
    /// Whether the key with this hash may be in the filter.
    async fn may_contain(&self, filter: &str, meta: Generation, hash: KeyHash) -> StoreResult<bool>;
}

/// What a write (and a delete) asks of the filter store: the keys' bits added to every
/// generation the state names, before the database write; deletes counted against them.
#[async_trait]
pub trait WriteStore: StateStore {
    /// Sets the keys' bits and bumps changed segments' versions, then, for a generation with
    /// an insert journal, appends the hashes to it as one entry, in one atomic step (an entry is
    /// never seen without its bits; see `bloomgate_filter::journal`). Errs if any key could not
    /// be added, or the journal that should take the entry is missing (it is created with its
    /// generation and never re-created): the caller must not acknowledge it. Adds to a segment
    /// no reader can use succeed and change nothing: a retired one (see `retire_generation`),
    /// or one found half gone (bits or version missing), which is first marked lost for good,
    /// so that no origin or edge ever reads it again. A segment is never re-created as zeros.
    async fn add(&self, filter: &str, meta: Generation, hashes: Vec<KeyHash>) -> StoreResult<()>;
    /// Counts `n` keys deleted from the database whose bits generation `meta` still holds.
    /// Kept in the filter store, so every origin's deletes count toward the stale-delete
    /// threshold, and a new generation starts from zero.
    async fn count_deletes(&self, filter: &str, meta: Generation, n: u64) -> StoreResult<()>;
}

/// What a copy of a generation is loaded and kept current from: the journal's head, whole
/// segments, and the journal after a position (the local copies, and the edge's feed).
#[async_trait]
pub trait CopySource: Send + Sync + 'static {
    /// The journal's head: the position of its last entry.
    async fn journal_head(&self, filter: &str, meta: Generation) -> StoreResult<JournalPosition>;
    /// A segment's version and bits, read atomically (under the write timeout: an edge may
    /// wait for a 64 KiB read, a lookup may not).
    async fn segment(&self, filter: &str, meta: Generation, index: u32) -> StoreResult<SegmentBits>;
    /// The journal entries `page` asks for (as
    /// [`EdgeFeedStore::read_journal`]), for a local copy's read barrier, which lookups wait on:
    /// under the lookup timeout rather than the write timeout.
    async fn catch_up_journal(&self, filter: &str, meta: Generation, page: JournalPage) -> StoreResult<JournalRead>;
}

/// What the edge's feed reads beyond a copy's needs: every segment's version (for manifests
/// without a journal) and journal chunks under the write timeout.
#[async_trait]
pub trait EdgeFeedStore: StateStore + CopySource {
    /// Current versions of all segments of a generation.
    async fn segment_versions(&self, filter: &str, meta: Generation) -> StoreResult<Vec<u64>>;
    /// The journal entries `page` asks for.
    async fn read_journal(&self, filter: &str, meta: Generation, page: JournalPage) -> StoreResult<JournalRead>;
    /// The chunk of `meta`'s journal from `start_ms` to `end_ms` by its ids, sealed first when
    /// Redis's clock is past its end (see `SealedRead`); its hashes only `with_entries`. A store
    /// that keeps no stream ids (one in process) has none.
    async fn read_sealed_chunk(
        &self,
        _filter: &str,
        _meta: Generation,
        _start_ms: u64,
        _end_ms: u64,
        _with_entries: bool,
    ) -> StoreResult<SealedRead> {
        Err(FilterUnavailable::Error(
            "this filter store keeps no sealed journal chunks (a filter in process); the edge uses the journal".into(),
        ))
    }
}

/// What a filter's stats and the recovery check read about its generations: fill, deletes,
/// memory, the journal's size, a rebuild's progress and lease, whether every segment is whole.
#[async_trait]
pub trait StatsStore: StateStore {
    /// Number of set bits over the active generation (for stats).
    async fn count_ones(&self, filter: &str, meta: Generation) -> StoreResult<u64>;
    /// Set bits over at most `max_segments` segments spread evenly over the generation, and
    /// how many segments were counted: a fill estimate whose cost does not grow with the
    /// filter (the recovery check runs it on every origin, every interval).
    async fn count_ones_sampled(&self, filter: &str, meta: Generation, max_segments: u32) -> StoreResult<(u64, u32)>;
    /// Deletes counted against generation `meta` (0 if none).
    async fn deletes(&self, filter: &str, meta: Generation) -> StoreResult<u64>;
    /// Bytes of memory the filter store reports for this filter, if it knows.
    async fn memory_bytes(&self, filter: &str, meta: Generation) -> StoreResult<Option<u64>>;
    /// How much the journal keeps.
    async fn journal_size(&self, filter: &str, meta: Generation) -> StoreResult<JournalSize>;
    /// The last published progress of a rebuild of `filter`, if any.
    async fn progress(&self, filter: &str) -> StoreResult<Option<BuildProgress>>;
    /// Checks that every segment of `meta` has its bits at full size and a version, and that
    /// its journal exists: `SegmentMissing` names the first segment that is not whole (0 for a
    /// lost journal).
    async fn segments_intact(&self, filter: &str, meta: Generation) -> StoreResult<()>;
    /// The owner of the filter's rebuild lease, if it is held.
    async fn lease_holder(&self, filter: &str) -> StoreResult<Option<String>>;
}

/// What names, fills, switches and retires generations: creating and dropping filters, and
/// rebuilds (with their lease and published progress).
#[async_trait]
pub trait LifecycleStore: StateStore {
    /// The incarnation of the store process answering now (see [`state`](StateStore::state)).
    async fn incarnation(&self) -> StoreResult<u64>;
    /// Creates generation `meta.generation` with all segments zeroed and its insert journal
    /// (idempotent). Does not change which generation is active.
    async fn create_generation(&self, filter: &str, meta: Generation) -> StoreResult<()>;
    /// Replaces the filter's state if its revision is still `expected` (None: if there is no
    /// state), in one atomic step; the stored revision becomes `expected + 1` (1 for a new
    /// state). False if someone else changed it first.
    async fn replace_state(&self, filter: &str, expected: Option<u64>, state: FilterState) -> StoreResult<bool>;
    /// ORs a built segment's payload into generation `meta` (keeping bits that concurrent adds
    /// set meanwhile) and bumps its version, atomically. Fails if the segment is missing.
    async fn merge_segment(&self, filter: &str, meta: Generation, index: u32, payload: Vec<u8>) -> StoreResult<()>;
    /// Makes generation `meta` unreadable, segment by segment: its bits are deleted (reads
    /// fall through) while adds to it still succeed as no-ops, so writes that read the state
    /// before it stopped naming the generation do not fail. Call before the state stops
    /// naming the generation. Also drops its delete count.
    async fn retire_generation(&self, filter: &str, meta: Generation) -> StoreResult<()>;
    /// Retires `generations`, then waits out their read leases: what every state change that
    /// stops naming a generation does first (see `crate::lease`: a write that skips a
    /// generation read the state after it was unnamed, so no lease of it can still hold when
    /// that write is acknowledged).
    async fn retire_and_wait(&self, filter: &str, generations: &[Generation]) -> StoreResult<()> {
        for meta in generations {
            self.retire_generation(filter, *meta).await?;
        }
        let retired_at = BootClock.now();
        crate::lease::wait_out(&BootClock, retired_at, generations.iter().map(|m| m.lease)).await;
        Ok(())
    }
    /// Deletes the keys of every generation of `filter` not in `keep` (left behind when the
    /// state was lost, or by a rebuild that died); returns how many keys went. Retired
    /// segments' markers are left to expire on their own.
    async fn delete_orphans(&self, filter: &str, keep: Vec<u64>) -> StoreResult<u64>;
    /// What a dropped filter leaves but its tombstone (its state) and the retirement markers
    /// (which expire on their own, and until then turn late adds into no-ops): the bits and
    /// journals of every generation, delete counts, a rebuild's progress and lease. Returns how
    /// many keys went.
    async fn clear_dropped(&self, filter: &str) -> StoreResult<u64>;
    /// Publishes a rebuild's progress (it expires on its own if not republished).
    async fn set_progress(&self, filter: &str, progress: BuildProgress) -> StoreResult<()>;
    /// Takes the filter's rebuild lease for `owner` unless someone else holds it; true if taken
    /// (or already held by `owner`, in which case it is extended).
    async fn lease(&self, filter: &str, owner: &str, ttl: std::time::Duration) -> StoreResult<bool>;
    /// Releases the lease if `owner` holds it.
    async fn release_lease(&self, filter: &str, owner: &str) -> StoreResult<()>;
    /// Posts a rebuild's runs of generation `generation` for any origin to build (see
    /// `run_board`). A store that cannot share a rebuild (one in process) posts nothing: the
    /// rebuild then builds every run itself.
    async fn post_runs(&self, _filter: &str, _generation: u64, _plan: &RunPlan) -> StoreResult<()> {
        Ok(())
    }
    /// The runs posted for `generation` and those done; None if none are posted.
    async fn run_board(&self, _filter: &str, _generation: u64) -> StoreResult<Option<RunBoard>> {
        Ok(None)
    }
    /// Claims run `index` of `generation` for `owner` for `ttl` unless another owner holds it;
    /// true if claimed (or already held by `owner`, then extended).
    async fn claim_run(
        &self,
        _filter: &str,
        _generation: u64,
        _index: u32,
        _owner: &str,
        _ttl: std::time::Duration,
    ) -> StoreResult<bool> {
        Ok(true)
    }
    /// Marks run `index` done, with the keys its scan read, and releases `owner`'s claim.
    async fn finish_run(
        &self,
        _filter: &str,
        _generation: u64,
        _index: u32,
        _owner: &str,
        _keys: u64,
    ) -> StoreResult<()> {
        Ok(())
    }
    /// Takes `generation`'s board down (its rebuild switched or gave up).
    async fn withdraw_runs(&self, _filter: &str, _generation: u64) -> StoreResult<()> {
        Ok(())
    }
}

/// The whole filter store, as one object implements it: every role, and whether it answers.
#[async_trait]
pub trait FilterStore: LookupStore + WriteStore + EdgeFeedStore + StatsStore + LifecycleStore {
    /// Whether the store is reachable now.
    async fn ping(&self) -> StoreResult<()>;
}

/// One filter store, handed out by role: every handle is the same object, typed by what the
/// path holding it may ask (see the module doc).
#[derive(Clone)]
pub struct FilterStoreRoles {
    /// For lookups.
    pub lookup: Arc<dyn LookupStore>,
    /// For writes and deletes.
    pub write: Arc<dyn WriteStore>,
    /// For local copies.
    pub copies: Arc<dyn CopySource>,
    /// For the edge's manifests, journal chunks and segments.
    pub edge_feed: Arc<dyn EdgeFeedStore>,
    /// For stats and the recovery check.
    pub stats: Arc<dyn StatsStore>,
    /// For creating and dropping filters, and rebuilds.
    pub lifecycle: Arc<dyn LifecycleStore>,
    /// The whole, for what hands it on (rebuilds) and health checks.
    pub whole: Arc<dyn FilterStore>,
}

impl FilterStoreRoles {
    /// `store`'s roles.
    pub fn of(store: Arc<dyn FilterStore>) -> FilterStoreRoles {
        FilterStoreRoles {
            lookup: store.clone(),
            write: store.clone(),
            copies: store.clone(),
            edge_feed: store.clone(),
            stats: store.clone(),
            lifecycle: store.clone(),
            whole: store,
        }
    }
}
