//! The two backends behind small traits: the shared *filter* (Redis in production, in-process
//! for the quick start) and the *database*, the source of truth (Cassandra in production,
//! redb for the quick start). All I/O to a system lives in that system's module.
//!
//! # Layout
//! - [`roles`]: the filter store's traits, one per path that calls it, and [`FilterStoreRoles`].
//! - [`state`]: a filter's generations and which of them readers and writers may use (pure).
//! - [`redis`]: the filter in Redis or a Redis Cluster.
//! - [`cassandra`]: the database in Cassandra.
//! - [`embedded`]: the quick start's filter in process and keys in a redb file.
//! - [`drop_record`]: what a drop leaves in the database for good (pure).
//! - [`checkpoint`]: a generation's segments saved in the database, and whether a checkpoint
//!   may seed a recovery (pure).
//! - [`recent_writes`]: the log of recent writes recovery replays, its buckets and format (pure).
//! - [`connecting`]: a database connected in the background, failing as an outage until then.
//! - [`tls`]: the stores' TLS configuration, from the configured files.
//! - Here: the types every backend shares, and the [`Database`] trait.

pub mod cassandra;
pub mod checkpoint;
pub mod connecting;
pub mod drop_record;
pub mod embedded;
pub mod recent_writes;
pub mod redis;
pub mod roles;
pub mod run_board;
pub mod state;
pub mod tls;

pub use roles::{
    CopySource, EdgeFeedStore, FilterStore, FilterStoreRoles, LifecycleStore, LookupStore, StateStore, StatsStore,
    WriteStore,
};
pub use state::{decode_state, Dropped, FilterState, Generation, STATE_FORMAT};

use crate::cluster_version::{ClusterVersion, LiveOrigin};
use async_trait::async_trait;
use bloomgate_filter::{JournalPosition, KeyFormat, KeyHash};
use checkpoint::{Checkpoint, SavedSegment};
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
    /// A shared record is in a format newer than this build reads: a newer origin wrote it
    /// (mid-upgrade). Never guessed at: lookups fall through, writes and changes are refused.
    #[error("{record} is in format {found}; this origin reads formats up to {known}: upgrade it")]
    UnknownFormat {
        /// Which record.
        record: &'static str,
        /// The format it is in.
        found: u32,
        /// The newest format this build reads.
        known: u32,
    },
}

/// What every filter-store call returns: its answer, or why the filter could not give one.
pub type StoreResult<T> = Result<T, FilterUnavailable>;

/// A segment read for the edge: its version and payload, read atomically.
#[derive(Clone, Debug)]
pub struct SegmentBits {
    /// Version of the bits.
    pub version: u64,
    /// Payload bytes.
    pub payload: Vec<u8>,
}

/// Which entries a read of a generation's insert journal asks for: those after `after`, at
/// most `max_entries` of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JournalPage {
    /// The reader's position: entries after it.
    pub after: JournalPosition,
    /// At most this many entries.
    pub max_entries: u32,
}

/// What a read of a journal chunk by time found (`EdgeFeedStore::read_sealed_chunk`): the
/// journal's state, read atomically with the entries, from which
/// `bloomgate_filter::sealed_chunk::seal` decides whether the chunk may be served.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SealedRead {
    /// Redis's clock when it read, ms since the Unix epoch.
    pub redis_now_ms: u64,
    /// Milliseconds of the journal's last id (after any seal).
    pub last_id_ms: u64,
    /// Milliseconds of the newest id ever deleted (`XDEL`): a chunk starting at or before it
    /// may have lost entries.
    pub max_deleted_ms: u64,
    /// Whether no entry at or after the chunk's start was ever trimmed: the journal lost none
    /// at all, or an entry before the chunk is still kept (trimming takes the oldest first).
    pub whole_from_start: bool,
    /// The span of ids adds were given ahead of the clock, if any was recorded.
    pub stepped_back: Option<bloomgate_filter::sealed_chunk::SteppedBack>,
    /// The chunk's key hashes, in journal order; empty unless it is sealed.
    pub hashes: Vec<KeyHash>,
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
        /// The filter store's clock when it read the journal, in µs since the Unix epoch, if it
        /// says (Redis does): a local copy checks its own clock against it
        /// (`lease::clock_check`).
        store_time_us: Option<u64>,
    },
    /// Entries after the position asked for are no longer kept (retention), or the position
    /// is not one of this journal's: the segments must be fetched whole.
    Reset,
}

impl JournalRead {
    /// Nothing after `after`, which is the head: the reader is caught up.
    pub fn caught_up(after: JournalPosition) -> JournalRead {
        JournalRead::Entries { to: after, entries: Vec::new(), head: after.added, store_time_us: None }
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

/// The database failed: the answer is unknown, so the caller gets a 503, never a "no".
#[derive(Clone, Debug, thiserror::Error)]
pub enum DatabaseError {
    /// The store did not answer within its timeout.
    #[error("database timed out")]
    Timeout,
    /// Any other failure.
    #[error("database error: {0}")]
    Error(String),
    /// A filter's definition (or drop record) is in a format newer than this build reads: a newer origin wrote
    /// it. Refused, never guessed at: the filter's lookups and writes answer 503 until this
    /// origin is upgraded.
    #[error(
        "filter {filter:?}: its {record} is in format {found}, and this origin reads formats up to {known}: upgrade this origin"
    )]
    UnknownFormat {
        /// The filter.
        filter: String,
        /// Which of its records: "definition" or "drop record".
        record: &'static str,
        /// The format its definition is in.
        found: i32,
        /// The newest definition format this build reads.
        known: i32,
    },
}

impl DatabaseError {
    /// Any other failure, by its message.
    pub fn other(e: impl std::fmt::Display) -> DatabaseError {
        DatabaseError::Error(e.to_string())
    }
}

/// What a scan of the database hands every stored key to (normalised bytes). Called from as
/// many concurrent scans as the store runs, so it must be `Sync`.
pub type KeySink<'a> = &'a (dyn for<'k> Fn(&'k [u8]) + Send + Sync + 'a);

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
    async fn scan_keys(&self, filter: &str, concurrency: usize, sink: KeySink<'_>) -> Result<u64, DatabaseError>;
    /// Every filter definition (for recovery checks).
    async fn filters(&self) -> Result<Vec<FilterDef>, DatabaseError>;
    /// Changes a filter's sizing (a resize); the next rebuild uses it.
    async fn resize_filter(&self, name: &str, capacity: u64, fp_rate: f64) -> Result<(), DatabaseError>;
    /// Stores a filter definition unless one exists. Returns the stored definition and whether
    /// this call created it.
    async fn create_filter(&self, def: &FilterDef) -> Result<(FilterDef, bool), DatabaseError>;
    /// Records that filter `name` was dropped (`dropped`, kept for good: a filter created
    /// again under the name must respect it), then deletes its definition; true if there was
    /// one. The record is written first, so whoever finds the definition gone finds it.
    async fn drop_filter(&self, name: &str, dropped: Dropped) -> Result<bool, DatabaseError>;
    /// What the last drop of a filter named `name` left (see [`drop_record`]), if it was ever
    /// dropped by an origin that keeps the record.
    async fn dropped(&self, name: &str) -> Result<Option<Dropped>, DatabaseError>;
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

    // The cluster version (see `cluster_version`). The defaults are a database only one origin
    // uses (the embedded key file): it has no cluster to agree with, so it is at this build's
    // version, keeps no reports and no log.

    /// The cluster version as recorded ([`ClusterVersion::unrecorded`] where none is).
    async fn cluster_version(&self) -> Result<ClusterVersion, DatabaseError> {
        Ok(ClusterVersion { version: crate::cluster_version::CLUSTER_VERSION, raised_at_ms: 0 })
    }
    /// Raises the cluster version from `from` to `to`, only if it is still `from` (a
    /// compare-and-set: two operators raising at once raise it once); whether it did.
    async fn raise_cluster_version(&self, _from: u32, _to: u32) -> Result<bool, DatabaseError> {
        Ok(false)
    }
    /// Records that an origin runs, and the newest cluster version it knows.
    async fn report_origin(&self, _report: &LiveOrigin) -> Result<(), DatabaseError> {
        Ok(())
    }
    /// The origins' recent reports (those past [`crate::cluster_version::LIVE_WITHIN`] may
    /// be among them: the caller decides who is live).
    async fn origin_reports(&self) -> Result<Vec<LiveOrigin>, DatabaseError> {
        Ok(Vec::new())
    }
    /// Logs `keys` of `filter` as written when this origin's clock read `at_ms` (see
    /// [`recent_writes`]).
    async fn log_recent_writes(&self, _filter: &str, _keys: &[&[u8]], _at_ms: u64) -> Result<(), DatabaseError> {
        Ok(())
    }
    /// The keys logged for `filter` in one bucket of the log (see [`recent_writes`]).
    async fn recent_writes_in(&self, _filter: &str, _bucket: i64) -> Result<Vec<Vec<u8>>, DatabaseError> {
        Ok(Vec::new())
    }

    // Checkpoints (see [`checkpoint`]); the defaults keep none: a database only one origin
    // uses recovers by a scan of its own file.

    /// The newest checkpoint of `filter` (None: none, or one in a newer format).
    async fn checkpoint(&self, _filter: &str) -> Result<Option<Checkpoint>, DatabaseError> {
        Ok(None)
    }
    /// The labels of the segments saved for `generation` of `filter` (not their bits).
    async fn saved_segments(&self, _filter: &str, _generation: u64) -> Result<Vec<SavedSegment>, DatabaseError> {
        Ok(Vec::new())
    }
    /// Saves a segment's bits as read at `read_at_ms`: of two saves, the later read wins.
    async fn save_segment(
        &self,
        _filter: &str,
        _generation: u64,
        _segment: SavedSegment,
        _bits: &[u8],
        _read_at_ms: u64,
    ) -> Result<(), DatabaseError> {
        Ok(())
    }
    /// A saved segment's bits.
    async fn saved_segment_bits(
        &self,
        _filter: &str,
        _generation: u64,
        _index: u32,
    ) -> Result<Option<Vec<u8>>, DatabaseError> {
        Ok(None)
    }
    /// Records `checkpoint` as `filter`'s newest (of two, the later `R` wins).
    async fn record_checkpoint(&self, _filter: &str, _checkpoint: Checkpoint) -> Result<(), DatabaseError> {
        Ok(())
    }
    /// Forgets the segments saved for `generation` of `filter` (a checkpoint of a newer one was
    /// recorded).
    async fn forget_saved_segments(&self, _filter: &str, _generation: u64) -> Result<(), DatabaseError> {
        Ok(())
    }
}
