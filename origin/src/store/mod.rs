//! The two backends behind small traits: the shared *filter* (Redis in production, in-process
//! for the quick start) and the *database*, the source of truth (Cassandra in production,
//! redb for the quick start). All I/O to a system lives in that system's module.

pub mod cassandra;
pub mod cassandra_schema;
pub mod consistency;
pub mod embedded;
pub mod key_file;
pub mod redis;
pub mod redis_cluster;
pub mod redis_conn;
pub mod redis_link;
pub mod state;

pub use state::{Dropped, FilterMeta, FilterState};

use crate::build_progress::BuildProgress;
use async_trait::async_trait;
use bloomgate_filter::{JournalPosition, KeyFormat, KeyHash};
use serde::{Deserialize, Serialize};

/// A filter's definition: what the operator asked for. Stored in the database (the truth).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FilterDef {
    /// Filter name (`[a-z0-9_-]{1,64}`).
    pub name: String,
    /// How keys are written.
    pub key_format: KeyFormat,
    /// Keys the filter is sized for.
    pub capacity: u64,
    /// Target false-positive rate at capacity.
    pub fp_rate: f64,
    /// Bytes per segment.
    pub segment_bytes: u64,
}

/// Why the filter could not answer. Never means "not found": every one of these falls through
/// to the database (the gate counts each under its metrics label).
#[derive(Clone, Debug, thiserror::Error)]
pub enum FilterUnavailable {
    /// The filter store did not answer within its timeout.
    #[error("filter store timed out")]
    Timeout,
    /// The filter store could not be reached or returned an error.
    #[error("filter store error: {0}")]
    Error(String),
    /// The metadata (generation marker) is absent: flushed, restarted empty, evicted.
    #[error("filter metadata missing")]
    MetaMissing,
    /// The key's segment is absent or the wrong size.
    #[error("filter segment {0} missing")]
    SegmentMissing(u32),
    /// The bits belong to another incarnation of the filter store: it restarted or failed
    /// over since they were written, and may have lost some.
    #[error("the filter store restarted or failed over since these bits were written")]
    Incarnation,
    /// The filter was dropped (its state is a tombstone). Not a fall-through: a lookup answers
    /// "no such filter" and a write is refused, never "not seen".
    #[error("the filter was dropped")]
    Dropped,
}

/// A segment read for the edge: its version and payload, read atomically.
#[derive(Clone, Debug)]
pub struct SegmentBits {
    /// Version of the bits.
    pub version: u64,
    /// Payload bytes.
    pub payload: Vec<u8>,
}

/// What a read of a generation's insert journal found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JournalRead {
    /// The entries after the position asked for, in order, ending at `to` (which may be short
    /// of the head when there were more than asked for: ask again from `to`).
    Entries {
        /// The position of the last entry returned (the position asked for if none).
        to: JournalPosition,
        /// Each entry's key hashes.
        entries: Vec<Vec<KeyHash>>,
        /// Entries the journal had ever had when read (atomically with the entries): `to` is
        /// the head then exactly when `to.added == head`.
        head: u64,
    },
    /// Entries after the position asked for are no longer kept (retention), or the position
    /// is not one of this journal's: the segments must be fetched whole.
    Reset,
}

impl JournalRead {
    /// Nothing after `after`, which is the head: the reader is caught up.
    pub fn caught_up(after: JournalPosition) -> JournalRead {
        JournalRead::Entries { to: after, entries: Vec::new(), head: after.added }
    }
}

/// Size of a generation's journal, for stats.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct JournalSize {
    /// Entries kept.
    pub entries: u64,
    /// Bytes the filter store uses for them, if it says.
    pub bytes: Option<u64>,
}

/// How long a generation's insert journal keeps its entries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JournalRetention {
    /// Entries kept at most (approximately: the store trims in whole blocks).
    pub max_entries: u64,
    /// Entries older than this are dropped (approximately).
    pub max_age: std::time::Duration,
}

/// The shared filter.
#[async_trait]
pub trait FilterStore: Send + Sync + 'static {
    /// Creates generation `meta.generation` with all segments zeroed and its insert journal
    /// (idempotent). Does not change which generation is active.
    async fn create_generation(&self, filter: &str, meta: FilterMeta) -> Result<(), FilterUnavailable>;
    /// The filter's generations, with `read_from` set to the incarnation of the store process
    /// that answered; `MetaMissing` if the filter store has no record of the filter.
    async fn state(&self, filter: &str) -> Result<FilterState, FilterUnavailable>;
    /// [`state`](Self::state) for the write path and admin reads (stats): under the write
    /// timeout, since a write must not fail because lookups' short timeout expired behind
    /// other writes' scripts.
    async fn state_for_write(&self, filter: &str) -> Result<FilterState, FilterUnavailable> {
        self.state(filter).await
    }
    /// The incarnation of the store process answering now (see [`state`](Self::state)).
    async fn incarnation(&self) -> Result<u64, FilterUnavailable>;
    /// Replaces the filter's state if its revision is still `expected` (None: if there is no
    /// state), in one atomic step; the stored revision becomes `expected + 1` (1 for a new
    /// state). False if someone else changed it first.
    async fn replace_state(
        &self,
        filter: &str,
        expected: Option<u64>,
        state: FilterState,
    ) -> Result<bool, FilterUnavailable>;
    /// ORs a built segment's payload into generation `meta` (keeping bits that concurrent adds
    /// set meanwhile) and bumps its version, atomically. Fails if the segment is missing.
    async fn merge_segment(
        &self,
        filter: &str,
        meta: FilterMeta,
        index: u32,
        payload: Vec<u8>,
    ) -> Result<(), FilterUnavailable>;
    /// Counts `n` keys deleted from the database whose bits generation `meta` still holds.
    /// Kept in the filter store, so every origin's deletes count toward the stale-delete
    /// threshold, and a new generation starts from zero.
    async fn count_deletes(&self, filter: &str, meta: FilterMeta, n: u64) -> Result<(), FilterUnavailable>;
    /// Deletes counted against generation `meta` (0 if none).
    async fn deletes(&self, filter: &str, meta: FilterMeta) -> Result<u64, FilterUnavailable>;
    /// Publishes a rebuild's progress (it expires on its own if not republished).
    async fn set_progress(&self, filter: &str, progress: BuildProgress) -> Result<(), FilterUnavailable>;
    /// The last published progress of a rebuild of `filter`, if any.
    async fn progress(&self, filter: &str) -> Result<Option<BuildProgress>, FilterUnavailable>;
    /// Makes generation `meta` unreadable, segment by segment: its bits are deleted (reads
    /// fall through) while adds to it still succeed as no-ops, so writes that read the state
    /// before it stopped naming the generation do not fail. Call before the state stops
    /// naming the generation. Also drops its delete count.
    async fn retire_generation(&self, filter: &str, meta: FilterMeta) -> Result<(), FilterUnavailable>;
    /// Deletes the keys of every generation of `filter` not in `keep` (left behind when the
    /// state was lost, or by a rebuild that died); returns how many keys went. Retired
    /// segments' markers are left to expire on their own.
    async fn delete_orphans(&self, filter: &str, keep: Vec<u64>) -> Result<u64, FilterUnavailable>;
    /// What a dropped filter leaves but its tombstone (its state) and the retirement markers
    /// (which expire on their own, and until then turn late adds into no-ops): the bits and
    /// journals of every generation, delete counts, a rebuild's progress and lease. Returns how
    /// many keys went.
    async fn clear_dropped(&self, filter: &str) -> Result<u64, FilterUnavailable>;
    /// Checks that every segment of `meta` has its bits at full size and a version, and that
    /// its journal exists: `SegmentMissing` names the first segment that is not whole (0 for a
    /// lost journal).
    async fn segments_intact(&self, filter: &str, meta: FilterMeta) -> Result<(), FilterUnavailable>;
    /// The owner of the filter's rebuild lease, if it is held.
    async fn lease_holder(&self, filter: &str) -> Result<Option<String>, FilterUnavailable>;
    /// Takes the filter's rebuild lease for `owner` unless someone else holds it; true if taken
    /// (or already held by `owner`, in which case it is extended).
    async fn lease(&self, filter: &str, owner: &str, ttl: std::time::Duration) -> Result<bool, FilterUnavailable>;
    /// Releases the lease if `owner` holds it.
    async fn release_lease(&self, filter: &str, owner: &str) -> Result<(), FilterUnavailable>;
    /// Whether the key with this hash may be in the filter.
    async fn may_contain(&self, filter: &str, meta: FilterMeta, hash: KeyHash) -> Result<bool, FilterUnavailable>;
    /// Sets the keys' bits and bumps changed segments' versions, then, for a generation with
    /// an insert journal, appends the hashes to it as one entry, in one atomic step (an entry is
    /// never seen without its bits; see `bloomgate_filter::journal`). Errs if any key could not
    /// be added, or the journal that should take the entry is missing (it is created with its
    /// generation and never re-created): the caller must not acknowledge it. Adds to a segment no reader can use succeed
    /// and change nothing: a retired one (see `retire_generation`), or one found half gone
    /// (bits or version missing), which is first marked lost for good, so that no origin or
    /// edge ever reads it again. A segment is never re-created as zeros.
    ///
    /// Every method taking a `meta` fails with `Incarnation` if the store process answering
    /// is not the one that holds `meta`'s bits.
    async fn add(&self, filter: &str, meta: FilterMeta, hashes: Vec<KeyHash>) -> Result<(), FilterUnavailable>;
    /// A segment's version and bits, read atomically (under the write timeout: an edge may
    /// wait for a 64 KiB read, a lookup may not).
    async fn segment(&self, filter: &str, meta: FilterMeta, index: u32) -> Result<SegmentBits, FilterUnavailable>;
    /// Current versions of all segments of a generation.
    async fn segment_versions(&self, filter: &str, meta: FilterMeta) -> Result<Vec<u64>, FilterUnavailable>;
    /// Number of set bits over the active generation (for stats).
    async fn count_ones(&self, filter: &str, meta: FilterMeta) -> Result<u64, FilterUnavailable>;
    /// Set bits over at most `max_segments` segments spread evenly over the generation, and
    /// how many segments were counted: a fill estimate whose cost does not grow with the
    /// filter (the recovery check runs it on every origin, every interval).
    async fn count_ones_sampled(
        &self,
        filter: &str,
        meta: FilterMeta,
        max_segments: u32,
    ) -> Result<(u64, u32), FilterUnavailable>;
    /// Bytes of memory the filter store reports for this filter, if it knows.
    async fn memory_bytes(&self, filter: &str, meta: FilterMeta) -> Result<Option<u64>, FilterUnavailable>;
    /// Whether the store is reachable now.
    async fn ping(&self) -> Result<(), FilterUnavailable>;
    /// The journal's head: the position of its last entry.
    async fn journal_head(&self, filter: &str, meta: FilterMeta) -> Result<JournalPosition, FilterUnavailable>;
    /// Up to `max_entries` entries after `after`.
    async fn read_journal(
        &self,
        filter: &str,
        meta: FilterMeta,
        after: JournalPosition,
        max_entries: u32,
    ) -> Result<JournalRead, FilterUnavailable>;
    /// [`read_journal`](Self::read_journal) for a local copy's read barrier, which lookups
    /// wait on: under the lookup timeout rather than the write timeout.
    async fn catch_up_journal(
        &self,
        filter: &str,
        meta: FilterMeta,
        after: JournalPosition,
        max_entries: u32,
    ) -> Result<JournalRead, FilterUnavailable> {
        self.read_journal(filter, meta, after, max_entries).await
    }
    /// How much the journal keeps.
    async fn journal_size(&self, filter: &str, meta: FilterMeta) -> Result<JournalSize, FilterUnavailable>;
}

/// The database failed: the answer is unknown, so the caller gets a 503, never a "no".
#[derive(Clone, Debug, thiserror::Error)]
pub enum DatabaseError {
    /// The store did not answer within its timeout.
    #[error("database timed out")]
    Timeout,
    /// Any other failure.
    #[error("database error: {0}")]
    Error(String),
}

/// The source of truth for keys and filter definitions.
#[async_trait]
pub trait Database: Send + Sync + 'static {
    /// Whether `key` is stored in `filter`, and its value.
    async fn get(&self, filter: &str, key: &[u8]) -> Result<Option<Vec<u8>>, DatabaseError>;
    /// Stores `key` (idempotent; overwrites the value).
    async fn put(&self, filter: &str, key: &[u8], value: &[u8]) -> Result<(), DatabaseError>;
    /// Removes `key`; true if it was there.
    async fn delete(&self, filter: &str, key: &[u8]) -> Result<bool, DatabaseError>;
    /// Calls `sink` with every stored key of `filter` (normalised bytes), from as many
    /// concurrent scans as the store likes (bounded by `concurrency`); returns the count.
    async fn scan_keys<'a>(
        &'a self,
        filter: &'a str,
        concurrency: usize,
        sink: &'a (dyn for<'k> Fn(&'k [u8]) + Send + Sync),
    ) -> Result<u64, DatabaseError>;
    /// Every filter definition (for recovery checks).
    async fn filters(&self) -> Result<Vec<FilterDef>, DatabaseError>;
    /// Changes a filter's sizing (a resize); the next rebuild uses it.
    async fn resize_filter(&self, name: &str, capacity: u64, fp_rate: f64) -> Result<(), DatabaseError>;
    /// Stores a filter definition unless one exists. Returns the stored definition and whether
    /// this call created it.
    async fn create_filter(&self, def: &FilterDef) -> Result<(FilterDef, bool), DatabaseError>;
    /// Deletes a filter's definition; true if there was one.
    async fn drop_filter(&self, name: &str) -> Result<bool, DatabaseError>;
    /// Whether any key is stored under `filter`: only a filter with none may start from empty
    /// bits. True when the store cannot tell cheaply (then the filter is built by a scan).
    async fn has_keys(&self, filter: &str) -> Result<bool, DatabaseError>;
    /// Deletes every key stored under `filter` (from as many concurrent scans as the store
    /// likes, bounded by `concurrency`); returns how many went.
    async fn delete_keys(&self, filter: &str, concurrency: usize) -> Result<u64, DatabaseError>;
    /// A filter definition.
    async fn filter(&self, name: &str) -> Result<Option<FilterDef>, DatabaseError>;
    /// Whether the store is reachable now.
    async fn ping(&self) -> Result<(), DatabaseError>;
}
