//! Online rebuild: a new generation built from the database while lookups and writes go on,
//! then switched to atomically. Drops the bits of deleted keys, changes size, and recovers a
//! filter whose bits were lost or rolled back.
//!
//! Why no acknowledged key is missed (the argument the tests and the chaos run check):
//! 1. The new generation G is created and named `building` in the filter state (a
//!    compare-and-set on its revision) *before* the scan starts.
//! 2. Every write reads the state fresh twice: before its adds and again after the database
//!    has its keys, adding to any generation named in between (`Gate::insert_many`). So an
//!    acknowledged write either added to G itself, or finished its key-store write before G
//!    was named, and then the scan, which starts after, reads it.
//! 3. The scan's bits are ORed into G (never overwriting the adds made meanwhile), and only
//!    then does the state switch `active` to G, in one compare-and-set.
//! 4. The replaced generation stays `previous`: it keeps taking adds, because origins may read
//!    it from their metadata cache for a while. After `grace` it is *retired* — its bits are
//!    deleted first, so a reader still holding it falls through — then its read lease is waited
//!    out, and only then does the state stop naming it (see `store::state` and `lease`).
//!
//! One rebuild per filter at a time: a lease with expiry in the filter store. A rebuild that
//! fails abandons its generation (retired, then unnamed); one whose origin died leaves it
//! named, and the next rebuild — started by any origin's recovery check once the lease has
//! expired — retires it first, with any generation of a lost Redis incarnation and any
//! `previous` whose retirement never came. When the state itself was lost, every generation it
//! named is made unreadable before a new one is named: origins may still hold one of them in
//! their metadata cache, and it would no longer receive adds; and since nobody knows on which
//! lease terms they were read, the longest lease any generation may record is waited out
//! before the new one is named. Every generation a rebuild names records the read lease of the
//! filter's mode (`FilterState::read_consistency`, the origin's default when none is recorded).
//!
//! # Layout
//! - `lease`: one rebuild per filter at a time: the lease, taken, renewed, released.
//! - `name`: phase 1, the new generation named `building` (after clearing what dead rebuilds
//!   and lost incarnations left).
//! - `fill`: phases 2 and 3, the database scanned into new bits, and the bits uploaded; the
//!   progress published for stats.
//! - `runs`: a filter larger than the rebuild's memory is filled in runs of segments, one scan
//!   each, posted on a board so that other origins build some of them (`help`).
//! - `replay`: a recovery's fill from a checkpoint and the log of recent writes, instead of
//!   phases 2 and 3's scan, when a usable checkpoint exists.
//! - `switch`: phase 4, the switch, and the replaced generation retired after the grace
//!   period; a failed rebuild's generation abandoned.
//! - Here: the options, the report and errors, and the phases run in turn.

mod fill;
mod help;
mod lease;
mod name;
mod replay;
mod runs;
mod switch;
#[cfg(test)]
mod tests;

pub use help::{help, HelpedRun};
pub use name::leftovers;

use crate::config::Config;
use crate::lease::LeaseSettings;
use crate::store::checkpoint::{ReplayMargins, ReplayPlan};
use crate::store::{Database, DatabaseError, FilterDef, FilterStore, FilterUnavailable, Generation};
use bloomgate_filter::{AllocError, Params, SizingOptions};
use fill::Published;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

/// How a rebuild runs.
#[derive(Clone, Debug)]
pub struct RebuildOptions {
    /// New capacity (a resize); default: the filter's.
    pub capacity: Option<u64>,
    /// New false-positive target; default: the filter's.
    pub fp_rate: Option<f64>,
    /// Concurrent scans of the database.
    pub concurrency: usize,
    /// Wait between naming the new generation and scanning. Not needed for correctness (see
    /// the module doc); kept for operators who want a window before the scan.
    pub settle: Duration,
    /// How long the replaced generation is kept after the switch.
    pub grace: Duration,
    /// Lease expiry; renewed while the rebuild runs.
    pub lease_ttl: Duration,
    /// Largest filter (bytes of bits) a rebuild may build.
    pub max_filter_bytes: u64,
    /// Bytes of new bits held in this process at once: a larger filter is built in runs of
    /// segments, one scan per run (`fill`).
    pub memory_bytes: u64,
    /// Draw a progress bar on stderr.
    pub progress: bool,
    /// Whether the new generation keeps an insert journal.
    pub journal: bool,
    /// The read lease the new generation records, by the filter's mode.
    pub lease: LeaseSettings,
    /// A recovery of lost bits: fill from the newest checkpoint and the writes logged since,
    /// within these margins, when one may be used (`replay`); None: scan every key.
    pub replay: Option<ReplayMargins>,
}

impl RebuildOptions {
    /// The options the configuration sets (no resize); `progress` draws the bar.
    pub fn from_config(config: &Config, progress: bool) -> RebuildOptions {
        RebuildOptions {
            capacity: None,
            fp_rate: None,
            concurrency: config.rebuild_concurrency.max(1),
            settle: Duration::from_millis(config.rebuild_settle_ms),
            grace: Duration::from_millis(config.rebuild_grace_ms),
            lease_ttl: Duration::from_millis(config.rebuild_lease_ms),
            max_filter_bytes: config.max_filter_bytes,
            memory_bytes: config.rebuild_memory_bytes,
            progress,
            journal: config.journal_enabled,
            lease: config.lease_settings(),
            replay: None,
        }
    }

    /// These options for a recovery of lost bits: from a checkpoint, when one may be used,
    /// with the margins the configuration sets (see `store::checkpoint::ReplayMargins`).
    pub fn recovering(self, config: &Config) -> RebuildOptions {
        let margins = ReplayMargins {
            request_timeout: Duration::from_millis(config.request_timeout_ms),
            clock_skew: Duration::from_millis(config.delete_skew_margin_ms),
        };
        RebuildOptions { replay: Some(margins), ..self }
    }
}

/// What a rebuild did.
#[derive(Clone, Debug, serde::Serialize)]
pub struct RebuildReport {
    /// The new active generation.
    pub generation: u64,
    /// Keys scanned into it (the most any of its scans found: writes go on meanwhile).
    pub keys: u64,
    /// Seconds spent scanning and building, all scans together.
    pub scan_secs: f64,
    /// Keys per second of the scan-and-build.
    pub keys_per_sec: f64,
    /// Seconds spent merging segments into the filter store.
    pub upload_secs: f64,
    /// Bytes of the whole filter's bits.
    pub filter_bytes: u64,
    /// Scans of the database: one per run of segments (`rebuild_memory_bytes`).
    pub scans: usize,
    /// Of those, the runs other origins built (`help`).
    pub scans_elsewhere: usize,
    /// Bytes of bits held in this process at once: the largest run (the rebuild's peak memory
    /// beyond the process's own).
    pub held_bytes: u64,
    /// What it was filled from: `scan` (every key read from the database), or `checkpoint`
    /// (a checkpoint's segments and the writes logged since).
    pub source: &'static str,
    /// Keys added from the log of recent writes (a fill from a checkpoint).
    pub replayed_keys: u64,
}

/// Why a rebuild did not happen.
#[derive(Debug, thiserror::Error)]
pub enum RebuildError {
    /// Another rebuild holds the lease.
    #[error("a rebuild of this filter is already running (lease held); try again when it ends")]
    Busy,
    /// No such filter.
    #[error("no filter named {0:?}")]
    UnknownFilter(String),
    /// Bad new sizing.
    #[error("{0}")]
    Params(#[from] bloomgate_filter::ParamsError),
    /// The sizing is over the origin's limits.
    #[error("{0}")]
    TooLarge(#[from] crate::sizing::SizeError),
    /// The bits could not be allocated in this process.
    #[error("{0}")]
    Alloc(#[from] AllocError),
    /// The filter store failed.
    #[error("filter store: {0}")]
    Filter(#[from] FilterUnavailable),
    /// The database failed.
    #[error("database: {0}")]
    Keys(#[from] DatabaseError),
    /// The lease was lost (expired or taken), or the state changed under the rebuild; nothing
    /// was switched.
    #[error("the rebuild lease was lost or the filter state changed before the switch; nothing was switched")]
    LeaseLost,
    /// The cluster was upgraded past what this origin knows: it starts no rebuild.
    #[error("the cluster is at version {found}, newer than this origin knows ({known})")]
    ClusterAhead {
        /// The cluster's version.
        found: u32,
        /// The newest this build knows.
        known: u32,
    },
}

/// Takes the lease and runs the rebuild in the background; `Busy` if another holds it.
pub async fn start(
    filters: Arc<dyn FilterStore>,
    keys: Arc<dyn Database>,
    filter: String,
    options: RebuildOptions,
) -> Result<tokio::task::JoinHandle<Result<RebuildReport, RebuildError>>, RebuildError> {
    let owner = lease::take(filters.as_ref(), &filter, options.lease_ttl).await?;
    Ok(tokio::spawn(async move {
        let lost = Arc::new(AtomicBool::new(false));
        let renewer = lease::keep(filters.clone(), &filter, &owner, options.lease_ttl, &lost);
        let result = run(filters.as_ref(), keys.as_ref(), &filter, &options, &lost).await;
        drop(renewer);
        let _ = filters.release_lease(&filter, &owner).await;
        if let Err(e) = &result {
            tracing::warn!(filter = %filter, cause = %e, "rebuild failed");
        }
        result
    }))
}

/// Runs a rebuild to the end (the `rebuild` command).
pub async fn rebuild(
    filters: Arc<dyn FilterStore>,
    keys: Arc<dyn Database>,
    filter: &str,
    options: RebuildOptions,
) -> Result<RebuildReport, RebuildError> {
    start(filters, keys, filter.to_owned(), options).await?.await.unwrap_or(Err(RebuildError::LeaseLost))
}

/// The params a rebuild of `def` builds (resized as `options` say), checked against the size
/// limits: a rebuild checks them before anything is stored, so a definition no rebuild could
/// build is never saved, and the API checks them before it starts one, to refuse at once.
pub fn sized(def: &FilterDef, options: &RebuildOptions, seed: u64) -> Result<Params, RebuildError> {
    let capacity = options.capacity.unwrap_or(def.capacity);
    let fp_rate = options.fp_rate.unwrap_or(def.fp_rate);
    let sizing = SizingOptions { seed, segment_bytes: def.segment_bytes };
    let params = Params::for_capacity_with(capacity, fp_rate, sizing)?;
    crate::sizing::check_size(&params, options.max_filter_bytes)?;
    Ok(params)
}

/// Retires a `previous` generation whose rebuild died before retiring it, under the lease.
/// Returns whether there was one to retire.
pub async fn retire_overdue_previous(
    filters: Arc<dyn FilterStore>,
    filter: &str,
    lease_ttl: Duration,
) -> Result<bool, RebuildError> {
    let owner = lease::take(filters.as_ref(), filter, lease_ttl).await?;
    let result = async {
        let state = filters.state_for_write(filter).await?;
        match state.previous {
            Some(old) => switch::retire_previous(filters.as_ref(), filter, old).await.map(|_| true),
            None => Ok(false),
        }
    }
    .await;
    let _ = filters.release_lease(filter, &owner).await;
    result
}

/// The rebuild, under the lease: the definition read (and resized), the new generation named,
/// then filled and switched to; a failure after it was named abandons it.
async fn run(
    filters: &dyn FilterStore,
    keys: &dyn Database,
    filter: &str,
    options: &RebuildOptions,
    lost: &AtomicBool,
) -> Result<RebuildReport, RebuildError> {
    let def = keys.filter(filter).await?.ok_or_else(|| RebuildError::UnknownFilter(filter.into()))?;
    let params = sized(&def, options, rand::random())?;
    if options.capacity.is_some() || options.fp_rate.is_some() {
        let (capacity, fp_rate) = (options.capacity.unwrap_or(def.capacity), options.fp_rate.unwrap_or(def.fp_rate));
        keys.resize_filter(filter, capacity, fp_rate).await?;
    }
    let fill = match options.replay {
        Some(margins) if options.capacity.is_none() && options.fp_rate.is_none() => {
            match replay::plan(keys, &def, options, margins).await? {
                Ok(plan) => Fill::Replay(plan, margins),
                Err(why) => {
                    tracing::info!(filter, why = %why, "recovery: no checkpoint to start from; scanning every key");
                    Fill::Scan
                }
            }
        }
        _ => Fill::Scan,
    };
    // A fill from a checkpoint names a generation of the checkpoint's params: its bits mean
    // something only under the same seed and sizing.
    let params = match &fill {
        Fill::Replay(plan, _) => plan.checkpoint.params,
        Fill::Scan => params,
    };
    let (new, named_revision) = name::name_generation(filters, filter, params, options.journal, options.lease).await?;
    match fill_and_switch(filters, keys, filter, options, lost, new, named_revision, fill).await {
        Ok(report) => Ok(report),
        Err(e) => {
            switch::abandon(filters, filter, new).await;
            Err(e)
        }
    }
}

/// What a new generation is filled from.
enum Fill {
    /// A scan of every key (phases 2 and 3).
    Scan,
    /// A checkpoint and the log since, within the margins (`replay`).
    Replay(ReplayPlan, ReplayMargins),
}

/// Phases 2 to 4 for the generation `new` named: filled (scanned and uploaded, or replayed),
/// switched to, then, after the grace period, the replaced generation retired.
#[allow(clippy::too_many_arguments)]
async fn fill_and_switch(
    filters: &dyn FilterStore,
    keys: &dyn Database,
    filter: &str,
    options: &RebuildOptions,
    lost: &AtomicBool,
    new: Generation,
    named_revision: u64,
    fill: Fill,
) -> Result<RebuildReport, RebuildError> {
    if let Fill::Replay(plan, margins) = fill {
        tracing::info!(
            filter,
            generation = new.generation,
            checkpoint = plan.checkpoint.generation,
            "recovery: new generation named; filling from the checkpoint and the log"
        );
        let replayed = replay::fill(filters, keys, filter, new, plan, margins, lost).await?;
        switch_and_retire(filters, filter, options, lost, new, named_revision).await?;
        tracing::info!(
            filter,
            generation = new.generation,
            keys_replayed = replayed.keys,
            secs = replayed.secs,
            "recovery: switched to the generation filled from the checkpoint"
        );
        return Ok(RebuildReport {
            generation: new.generation,
            keys: replayed.keys,
            scan_secs: 0.0,
            keys_per_sec: 0.0,
            upload_secs: replayed.secs,
            filter_bytes: new.params.total_bytes(),
            scans: 0,
            scans_elsewhere: 0,
            held_bytes: new.params.segment_bytes(),
            source: "checkpoint",
            replayed_keys: replayed.keys,
        });
    }
    tracing::info!(filter, generation = new.generation, "rebuild: new generation named; scanning");
    let before = filters.state_for_write(filter).await?;
    let runs = bloomgate_filter::segment_runs(&new.params, options.memory_bytes);
    let mut published = Published::settling(filters, filters, filter, new, &before, runs.len()).await;
    tokio::time::sleep(options.settle).await;
    // Each run is built from a whole scan that starts after `new` was named (here, or by an
    // origin that found the board posted after the naming): every key acknowledged before then
    // is read by each, and lands in the run that holds its segment.
    let builder = runs::Builder { store: filters, keys, filter, new, options, owner: runs::new_owner() };
    let built = builder.build_all(&runs, lost, &mut published).await?;
    let (count, scan_secs, upload_secs, held_bytes) =
        (built.keys, built.scan_secs, built.upload_secs, built.held_bytes);
    tracing::info!(filter, generation = new.generation, keys = count, scan_secs, "rebuild: filled; switching");
    switch_and_retire(filters, filter, options, lost, new, named_revision).await?;
    Ok(RebuildReport {
        generation: new.generation,
        keys: count,
        scan_secs,
        keys_per_sec: count as f64 / scan_secs.max(1e-9),
        upload_secs,
        filter_bytes: new.params.total_bytes(),
        scans: runs.len(),
        scans_elsewhere: built.runs_elsewhere,
        held_bytes,
        source: "scan",
        replayed_keys: 0,
    })
}

/// Phase 4: the switch to `new`, then, after the grace period, the replaced generation retired.
async fn switch_and_retire(
    filters: &dyn FilterStore,
    filter: &str,
    options: &RebuildOptions,
    lost: &AtomicBool,
    new: Generation,
    named_revision: u64,
) -> Result<(), RebuildError> {
    let replaced = switch::switch(filters, filter, new, named_revision, lost).await?;
    tracing::info!(filter, generation = new.generation, "rebuild: switched to the new generation");
    if let Some(old) = replaced {
        // Readers may hold the old generation for a while (metadata caches, edges fetching
        // its segments); it keeps taking adds meanwhile, so waiting only spares them a
        // fall-through. Then: bits gone first, name second.
        tokio::time::sleep(options.grace).await;
        switch::retire_previous(filters, filter, old).await?;
    }
    Ok(())
}
