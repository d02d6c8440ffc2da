//! The gate: lookups (filter first, database on "maybe" or when the filter is unavailable),
//! writes (filter first, then database), and the edge's manifest and segments.
//!
//! The two rules that make it safe live in [`after_filter`] and `Gate::insert_many` (`write`):
//! a filter that cannot answer is never read as "not seen", and no key is acknowledged unless
//! the filter already holds its bits.
//!
//! # Layout
//! - `lookup`: single and batch lookups, and the decision after the filter.
//! - `lookup_record`: what a lookup did, and the one place it is counted.
//! - `write`: writes and deletes.
//! - `edge_feed`: the edge's manifest, journal chunks and segments.
//! - `sealed_feed`: the shared feed: pages of sealed journal chunks, and segments at an epoch.
//! - `stats`: a filter's stats.
//! - `filters`: filters created, listed and dropped, and why a drop never lets an old bit or
//!   cache answer "no".
//! - `checkpoints`: one checkpoint round of a filter: its changed segments saved, then the
//!   checkpoint recorded.
//! - [`cluster`]: the cluster version as this origin last read it, what it lets this origin
//!   do, and the loop that reads it and reports this origin alive.
//! - `rebuilds`: the one door to a rebuild, and what the recovery check and the probes ask of
//!   the stores.
//!
//! Two gates over one filter store and one database, as two origins share Redis and
//! Cassandra, are tested in `origin/tests/two_origins.rs`.
//!
//! Each path reaches the filter store through its own role (`store.lookup`, `store.write`,
//! `store.edge_feed`, `store.stats`, `store.lifecycle`: see `store::roles`).

mod checkpoints;
pub mod cluster;
mod edge_feed;
mod filters;
mod lookup;
mod lookup_record;
mod rebuilds;
mod sealed_feed;
mod stats;
mod write;

pub use checkpoints::{CheckpointError, CheckpointRound};
pub use edge_feed::JournalChunk;
pub use filters::Created;
pub use lookup::{after_filter, AfterFilter, Answer, AnsweredBy};
pub use rebuilds::RebuildTask;
pub use sealed_feed::Refusal;

use crate::config::Config;
use crate::def_cache::DefCache;
use crate::error::AppError;
use crate::lease::boot_clock::{BootClock, Clock};
use crate::lease::LeaseSettings;
use crate::local_copy::LocalCopies;
use crate::metrics::Metrics;
use crate::read_mostly::ReadMostly;
use crate::store::{Database, FilterDef, FilterStore, FilterStoreRoles, Generation};
use arc_swap::ArcSwapOption;
use bloomgate_filter::validate_filter_name;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Lookups of one batch in flight at once against the stores.
const BATCH_CONCURRENCY: usize = 64;

/// The gate's state: both stores, caches of definitions and metadata, and metrics.
pub struct Gate {
    /// The filter store, by the role each path plays (see `store::roles`).
    store: FilterStoreRoles,
    /// The database: keys and definitions, the source of truth.
    database: Arc<dyn Database>,
    /// Metrics, shared with the HTTP layer.
    pub metrics: Arc<Metrics>,
    /// What the status page plots, sampled by the recovery check.
    pub status: crate::status_history::StatusHistory,
    /// Wakes the recovery check early: a request found the filter's bits lost.
    pub recovery_nudge: tokio::sync::Notify,
    /// The cluster version as this origin last read it.
    cluster: cluster::ClusterView,
    defs: DefCache,
    /// The filters' bits held in process (None: every lookup asks the filter store).
    copies: Option<LocalCopies>,
    /// The readable generation of each filter and when it was read (`lookup::meta`): a slot per
    /// filter, read by every lookup without a lock, replaced once per `cache_ttl`.
    metas: ReadMostly<Arc<ArcSwapOption<(Generation, Instant)>>>,
    cache_ttl: Duration,
    filter_enabled: bool,
    max_filter_bytes: u64,
    journal_enabled: bool,
    /// What the generations this origin names record of read leases.
    lease: LeaseSettings,
    /// The clock writers time their wait for read leases on (and copies their leases).
    clock: Arc<dyn Clock>,
    /// The rebuild lease's life: how long a create waits for a rebuild's lease.
    rebuild_lease: Duration,
    /// How long a write that found the bits lost waits for a generation that can take it.
    write_recovery_wait: Duration,
}

/// Settings of the gate.
#[derive(Clone, Copy, Debug)]
pub struct GateSettings {
    /// How long metadata and definitions are cached (an unknown name is never cached: see
    /// [`DefCache`]).
    pub cache_ttl: Duration,
    /// Consult the filter (false = baseline: every lookup reads the database).
    pub filter_enabled: bool,
    /// Largest filter (bytes of bits) a create, rebuild or resize may ask for.
    pub max_filter_bytes: u64,
    /// Name new generations with an insert journal (edges catch up from it). Adds append to
    /// a generation that has one whatever this says (see `Generation::journal`).
    pub journal_enabled: bool,
    /// Bytes of bits held in local copies (0: none; see `local_copy`).
    pub local_copy_max_bytes: u64,
    /// The read lease recorded in the generations this origin names, and its default mode.
    pub lease: LeaseSettings,
    /// How often a leased copy in use reads its journal (h; see `local_copy::tail`).
    pub lease_tail_every: Duration,
    /// How long the rebuild lease lives without renewal (a create names its filter's first
    /// generation under it; see `gate::filters`).
    pub rebuild_lease: Duration,
    /// How long a write that finds the filter's bits lost waits for a generation that can take
    /// it (see `Gate::insert_many`).
    pub write_recovery_wait: Duration,
}

impl GateSettings {
    /// The settings the configuration sets (`local_copy_max_bytes` as configured: the wiring
    /// turns copies off where the filter lives in this process).
    pub fn from_config(config: &Config) -> GateSettings {
        GateSettings {
            cache_ttl: Duration::from_millis(config.meta_cache_ms),
            filter_enabled: config.filter_enabled,
            max_filter_bytes: config.max_filter_bytes,
            journal_enabled: config.journal_enabled,
            local_copy_max_bytes: config.local_copy_max_bytes,
            lease: config.lease_settings(),
            lease_tail_every: config.read_lease_tail(),
            rebuild_lease: Duration::from_millis(config.rebuild_lease_ms),
            write_recovery_wait: Duration::from_millis(config.write_recovery_wait_ms),
        }
    }
}

/// Definition of a filter to create, as sent by a writer (the API's type).
pub use bloomgate_client::api::CreateFilter;

impl Gate {
    /// A gate over these stores.
    pub fn new(filter_store: Arc<dyn FilterStore>, database: Arc<dyn Database>, settings: GateSettings) -> Gate {
        let metrics = Arc::new(Metrics::default());
        let store = FilterStoreRoles::of(filter_store);
        let clock: Arc<dyn Clock> = Arc::new(BootClock);
        let copies = (settings.local_copy_max_bytes > 0).then(|| {
            let (max_bytes, every) = (settings.local_copy_max_bytes, settings.lease_tail_every);
            LocalCopies::with_tail(store.copies.clone(), max_bytes, metrics.clone(), every, clock.clone())
        });
        Gate {
            store,
            database,
            copies,
            metrics,
            status: crate::status_history::StatusHistory::default(),
            recovery_nudge: tokio::sync::Notify::new(),
            cluster: cluster::ClusterView::default(),
            defs: DefCache::new(settings.cache_ttl),
            metas: ReadMostly::default(),
            cache_ttl: settings.cache_ttl,
            filter_enabled: settings.filter_enabled,
            max_filter_bytes: settings.max_filter_bytes,
            journal_enabled: settings.journal_enabled,
            lease: settings.lease,
            clock,
            rebuild_lease: settings.rebuild_lease,
            write_recovery_wait: settings.write_recovery_wait,
        }
    }

    /// The database, for health checks.
    pub fn database(&self) -> &Arc<dyn Database> {
        &self.database
    }

    /// Bytes of filter bits held in local copies now.
    pub fn local_copy_bytes(&self) -> u64 {
        self.copies.as_ref().map_or(0, LocalCopies::held_bytes)
    }

    /// The filter store, whole: for rebuilds and health checks.
    pub fn filter_store(&self) -> &Arc<dyn FilterStore> {
        &self.store.whole
    }

    /// The filter store by role (the recovery check reads through `stats`).
    pub fn roles(&self) -> &FilterStoreRoles {
        &self.store
    }

    /// A filter's definition; unknown filters are a 404 (see [`DefCache`] for what a stream
    /// of made-up names costs).
    pub async fn def(&self, name: &str) -> Result<Arc<FilterDef>, AppError> {
        validate_filter_name(name)?;
        self.defs.get(self.database.as_ref(), name).await?.ok_or_else(|| AppError::UnknownFilter(name.into()))
    }
}

/// Normalises a batch, refusing all of it if any key is bad (the error names the index).
/// Its size was bounded where it was read (`routes::batch`, at `max_batch`), the one place
/// that limit is checked: keys past it are counted for the refusal, never kept.
fn normalize_batch(def: &FilterDef, raw: &[String]) -> Result<Vec<Vec<u8>>, AppError> {
    raw.iter()
        .enumerate()
        .map(|(i, k)| {
            def.key_format.normalize(k.as_bytes()).map_err(|e| AppError::BadRequest(format!("keys[{i}]: {e}")))
        })
        .collect()
}

/// A gate over the in-process filter store and a key file in a directory of its own (removed by
/// the caller), for the tests of the paths that hold one: the gate, both stores and the
/// directory.
#[cfg(test)]
pub(crate) fn in_process_gate(
    config: &Config,
) -> (
    Arc<Gate>,
    Arc<crate::store::embedded::MemoryFilterStore>,
    Arc<crate::store::embedded::RedbDatabase>,
    std::path::PathBuf,
) {
    let dir = std::env::temp_dir().join(format!("bloomgate-gate-test-{:016x}", rand::random::<u64>()));
    std::fs::create_dir_all(&dir).unwrap();
    let filters = Arc::new(crate::store::embedded::MemoryFilterStore::default());
    let keys = Arc::new(crate::store::embedded::RedbDatabase::open(&dir.join("keys.redb")).unwrap());
    let settings = GateSettings { local_copy_max_bytes: 0, ..GateSettings::from_config(config) };
    (Arc::new(Gate::new(filters.clone(), keys.clone(), settings)), filters, keys, dir)
}
