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
//!    deleted first, so a reader still holding it falls through — and only then does the state
//!    stop naming it (see `store::state`).
//!
//! One rebuild per filter at a time: a lease with expiry in the filter store. A rebuild that
//! fails abandons its generation (retired, then unnamed); one whose origin died leaves it
//! named, and the next rebuild — started by any origin's recovery check once the lease has
//! expired — retires it first, with any generation of a lost Redis incarnation and any
//! `previous` whose retirement never came. When the state itself was lost, every generation it
//! named is made unreadable before a new one is named: origins may still hold one of them in
//! their metadata cache, and it would no longer receive adds.

use crate::build_progress::{BuildPhase, BuildProgress};
use crate::config::Config;
use crate::store::{Database, DatabaseError, FilterMeta, FilterState, FilterStore, FilterUnavailable};
use bloomgate_filter::{AllocError, BloomFilter, Params, SizingOptions};
use indicatif::{ProgressBar, ProgressStyle};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

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
    /// Draw a progress bar on stderr.
    pub progress: bool,
    /// Whether the new generation keeps an insert journal.
    pub journal: bool,
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
            progress,
            journal: config.journal_enabled,
        }
    }
}

/// What a rebuild did.
#[derive(Clone, Debug, serde::Serialize)]
pub struct RebuildReport {
    /// The new active generation.
    pub generation: u64,
    /// Keys scanned into it.
    pub keys: u64,
    /// Seconds spent scanning and building.
    pub scan_secs: f64,
    /// Keys per second of the scan-and-build.
    pub keys_per_sec: f64,
    /// Seconds spent merging segments into the filter store.
    pub upload_secs: f64,
    /// Bytes of the in-memory bit array (the rebuild's peak memory beyond the process).
    pub filter_bytes: u64,
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
}

/// Takes the lease and runs the rebuild in the background; `Busy` if another holds it.
pub async fn start(
    filters: Arc<dyn FilterStore>,
    keys: Arc<dyn Database>,
    filter: String,
    options: RebuildOptions,
) -> Result<tokio::task::JoinHandle<Result<RebuildReport, RebuildError>>, RebuildError> {
    let owner = format!("{:016x}", rand::random::<u64>());
    if !filters.lease(&filter, &owner, options.lease_ttl).await? {
        return Err(RebuildError::Busy);
    }
    Ok(tokio::spawn(async move {
        let result = run_leased(&filters, &keys, &filter, &owner, &options).await;
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

/// A background task that ends when its handle is dropped: the lease renewer must die with the
/// rebuild, however the rebuild ends (a rebuild future dropped mid-way must not leave a renewer
/// holding the lease forever).
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Renews the lease in the background until dropped; sets `lost` if it cannot.
fn keep_lease(
    filters: &Arc<dyn FilterStore>,
    filter: &str,
    owner: &str,
    ttl: Duration,
    lost: &Arc<AtomicBool>,
) -> AbortOnDrop {
    let (filters, filter, owner, lost) = (filters.clone(), filter.to_owned(), owner.to_owned(), lost.clone());
    AbortOnDrop(tokio::spawn(async move {
        loop {
            tokio::time::sleep(ttl / 3).await;
            if !matches!(filters.lease(&filter, &owner, ttl).await, Ok(true)) {
                lost.store(true, Ordering::SeqCst);
                return;
            }
        }
    }))
}

async fn run_leased(
    filters: &Arc<dyn FilterStore>,
    keys: &Arc<dyn Database>,
    filter: &str,
    owner: &str,
    options: &RebuildOptions,
) -> Result<RebuildReport, RebuildError> {
    let lost = Arc::new(AtomicBool::new(false));
    let _renewer = keep_lease(filters, filter, owner, options.lease_ttl, &lost);
    build_and_switch(filters, keys, filter, options, &lost).await
}

/// The new generation's number: after every one the state names, not before its lineage (so
/// after every number a dropped filter of the name used), and from the clock so it is never
/// reused even when the filter store lost every record of earlier ones.
fn next_generation(state: &FilterState, now_ms: u64) -> u64 {
    let newest = state.named().map(|m| m.generation).max();
    now_ms.max(newest.map_or(0, |g| g + 1)).max(state.lineage)
}

/// What a rebuild must clear away before it names its own generation: a `building` left by a
/// rebuild that died (the caller holds the lease, so no live rebuild owns it), a `previous`
/// whose retirement never came, and every generation of another store incarnation. Pure.
pub fn leftovers(state: &FilterState) -> Vec<FilterMeta> {
    let mut out: Vec<FilterMeta> = state.stale().collect();
    out.extend(state.building.filter(|m| state.is_current(m)));
    out.extend(state.previous.filter(|m| state.is_current(m)));
    out
}

/// The filter's state read for a rebuild, with the revision a change must expect (None: there
/// is no state, the filter store lost it).
async fn read_state(filters: &dyn FilterStore, filter: &str) -> Result<(FilterState, Option<u64>), RebuildError> {
    match filters.state_for_write(filter).await {
        Ok(state) => Ok((state, Some(state.revision))),
        Err(FilterUnavailable::MetaMissing) => {
            let incarnation = filters.incarnation().await?;
            Ok((FilterState { read_from: incarnation, ..FilterState::default() }, None))
        }
        Err(e) => Err(e.into()),
    }
}

/// Retires the leftovers, then unnames them in one compare-and-set. Returns the state after.
async fn clear_leftovers(
    filters: &dyn FilterStore,
    filter: &str,
    state: FilterState,
    revision: Option<u64>,
) -> Result<(FilterState, Option<u64>), RebuildError> {
    let gone = leftovers(&state);
    if gone.is_empty() {
        return Ok((state, revision));
    }
    for meta in &gone {
        tracing::info!(filter, generation = meta.generation, "rebuild: retiring a leftover generation");
        filters.retire_generation(filter, *meta).await?;
    }
    let cleared =
        FilterState { active: state.readable(), building: None, previous: None, previous_since_ms: None, ..state };
    if !filters.replace_state(filter, revision, cleared).await? {
        return Err(RebuildError::LeaseLost);
    }
    Ok((cleared, Some(revision.map_or(1, |r| r + 1))))
}

async fn build_and_switch(
    filters: &Arc<dyn FilterStore>,
    keys: &Arc<dyn Database>,
    filter: &str,
    options: &RebuildOptions,
    lost: &AtomicBool,
) -> Result<RebuildReport, RebuildError> {
    let mut def = keys.filter(filter).await?.ok_or_else(|| RebuildError::UnknownFilter(filter.into()))?;
    let resize = options.capacity.is_some() || options.fp_rate.is_some();
    def.capacity = options.capacity.unwrap_or(def.capacity);
    def.fp_rate = options.fp_rate.unwrap_or(def.fp_rate);
    let sizing = SizingOptions { seed: rand::random(), segment_bytes: def.segment_bytes };
    let params = Params::for_capacity_with(def.capacity, def.fp_rate, sizing)?;
    // Checked with the real params before anything is stored: a definition no rebuild could
    // build is never saved.
    crate::sizing::check_size(&params, options.max_filter_bytes)?;
    if resize {
        keys.resize_filter(filter, def.capacity, def.fp_rate).await?;
    }
    let (state, revision) = read_state(filters.as_ref(), filter).await?;
    if state.dropped.is_some() {
        // Dropped: its generations are gone for good. (A rebuild that read the state before
        // the tombstone fails its compare-and-set below instead.)
        return Err(RebuildError::UnknownFilter(filter.into()));
    }
    if revision.is_none() {
        // The state is gone (its key deleted or evicted) but the generations it named may
        // still have their bits, and origins may hold one of them in their metadata cache.
        // Writes stop reaching them the moment a new generation is named, so they must be
        // unreadable before that.
        let deleted = filters.delete_orphans(filter, Vec::new()).await?;
        if deleted > 0 {
            tracing::info!(filter, keys = deleted, "rebuild: the filter state was lost; deleted the bits it named");
        }
    }
    let (state, revision) = clear_leftovers(filters.as_ref(), filter, state, revision).await?;
    let new = FilterMeta {
        generation: next_generation(&state, crate::clock::now_ms()),
        params,
        incarnation: state.read_from,
        journal: options.journal,
    };
    filters.create_generation(filter, new).await?;
    // A state made from nothing (the store lost it) starts a lineage of its own: a write that
    // read the lost one is not acknowledged into it (see `Gate::insert_many`).
    let lineage = if revision.is_none() { new.generation } else { state.lineage };
    let named = FilterState { building: Some(new), lineage, ..state };
    if !filters.replace_state(filter, revision, named).await? {
        filters.retire_generation(filter, new).await?;
        return Err(RebuildError::LeaseLost);
    }
    let named_revision = revision.map_or(1, |r| r + 1);
    match fill_and_switch(filters, keys, filter, options, lost, new, named_revision).await {
        Ok(report) => Ok(report),
        Err(e) => {
            abandon(filters.as_ref(), filter, new).await;
            Err(e)
        }
    }
}

/// Scans, uploads, switches, then retires the replaced generation after the grace period.
async fn fill_and_switch(
    filters: &Arc<dyn FilterStore>,
    keys: &Arc<dyn Database>,
    filter: &str,
    options: &RebuildOptions,
    lost: &AtomicBool,
    new: FilterMeta,
    named_revision: u64,
) -> Result<RebuildReport, RebuildError> {
    tracing::info!(filter, generation = new.generation, "rebuild: new generation named; scanning");
    let before = filters.state_for_write(filter).await?;
    let expected = expected_keys(filters.as_ref(), filter, &before).await;
    let mut progress = BuildProgress {
        generation: new.generation,
        phase: BuildPhase::Settling,
        keys_scanned: 0,
        keys_expected: expected,
        started_ms: crate::clock::now_ms(),
        updated_ms: crate::clock::now_ms(),
    };
    publish(filters.as_ref(), filter, &progress).await;
    tokio::time::sleep(options.settle).await;

    let started = Instant::now();
    let bits = BloomFilter::try_new_with_huge_pages(new.params)?;
    let scanned = AtomicU64::new(0);
    let bar = progress_bar(options.progress, expected);
    let now = crate::clock::now_ms();
    progress = BuildProgress { phase: BuildPhase::Scanning, started_ms: now, updated_ms: now, ..progress };
    publish(filters.as_ref(), filter, &progress).await;
    let count = {
        let sink = |key: &[u8]| {
            bits.insert_shared(key);
            let n = scanned.fetch_add(1, Ordering::Relaxed) + 1;
            if n.is_multiple_of(4096) {
                bar.set_position(n);
            }
        };
        let scan = keys.scan_keys(filter, options.concurrency, &sink);
        tokio::pin!(scan);
        loop {
            match tokio::time::timeout(PUBLISH_EVERY, &mut scan).await {
                Ok(result) => break result?,
                Err(_) => {
                    progress.keys_scanned = scanned.load(Ordering::Relaxed);
                    progress.updated_ms = crate::clock::now_ms();
                    publish(filters.as_ref(), filter, &progress).await;
                }
            }
        }
    };
    bar.set_position(count);
    bar.finish_and_clear();
    let scan_secs = started.elapsed().as_secs_f64();

    let uploading = Instant::now();
    progress = BuildProgress {
        phase: BuildPhase::Uploading,
        keys_scanned: count,
        updated_ms: crate::clock::now_ms(),
        ..progress
    };
    publish(filters.as_ref(), filter, &progress).await;
    let mut last_publish = Instant::now();
    for index in 0..new.params.segment_count {
        if lost.load(Ordering::SeqCst) {
            return Err(RebuildError::LeaseLost);
        }
        filters.merge_segment(filter, new, index, bits.segment_payload(index)).await?;
        if last_publish.elapsed() >= PUBLISH_EVERY {
            progress.updated_ms = crate::clock::now_ms();
            publish(filters.as_ref(), filter, &progress).await;
            last_publish = Instant::now();
        }
    }
    // The bits can be large: not held through the grace period.
    drop(bits);
    let upload_secs = uploading.elapsed().as_secs_f64();

    // Switch, unless the state moved under us (it only moves under the lease).
    let current = filters.state_for_write(filter).await?;
    if current.building != Some(new) || current.revision != named_revision || lost.load(Ordering::SeqCst) {
        return Err(RebuildError::LeaseLost);
    }
    let replaced = current.readable();
    let switched = FilterState {
        active: Some(new),
        building: None,
        previous: replaced,
        previous_since_ms: replaced.map(|_| crate::clock::now_ms()),
        ..current
    };
    if !filters.replace_state(filter, Some(current.revision), switched).await? {
        return Err(RebuildError::LeaseLost);
    }
    tracing::info!(
        filter,
        generation = new.generation,
        keys = count,
        scan_secs,
        "rebuild: switched to the new generation"
    );

    if let Some(old) = replaced {
        // Readers may hold the old generation for a while (metadata caches, edges fetching
        // its segments); it keeps taking adds meanwhile, so waiting only spares them a
        // fall-through. Then: bits gone first, name second.
        tokio::time::sleep(options.grace).await;
        retire_previous(filters.as_ref(), filter, old).await?;
    }
    Ok(RebuildReport {
        generation: new.generation,
        keys: count,
        scan_secs,
        keys_per_sec: count as f64 / scan_secs.max(1e-9),
        upload_secs,
        filter_bytes: new.params.total_bytes(),
    })
}

/// Retires `old`, then unnames it if the state still names it as `previous`.
async fn retire_previous(filters: &dyn FilterStore, filter: &str, old: FilterMeta) -> Result<(), RebuildError> {
    filters.retire_generation(filter, old).await?;
    for _ in 0..STATE_RETRIES {
        let latest = filters.state_for_write(filter).await?;
        if latest.previous != Some(old) {
            return Ok(());
        }
        let unnamed = FilterState { previous: None, previous_since_ms: None, ..latest };
        if filters.replace_state(filter, Some(latest.revision), unnamed).await? {
            return Ok(());
        }
    }
    Err(RebuildError::LeaseLost)
}

/// Times a small state change is retried when another origin changed the state first.
const STATE_RETRIES: usize = 5;

/// Gives up a generation this rebuild named: retired, then unnamed. Best effort: if it fails,
/// the generation stays named (it takes adds and is never read) until the next rebuild clears
/// it as a leftover.
async fn abandon(filters: &dyn FilterStore, filter: &str, new: FilterMeta) {
    let result: Result<(), FilterUnavailable> = async {
        filters.retire_generation(filter, new).await?;
        for _ in 0..STATE_RETRIES {
            let latest = filters.state_for_write(filter).await?;
            if latest.building != Some(new) {
                return Ok(());
            }
            if filters.replace_state(filter, Some(latest.revision), FilterState { building: None, ..latest }).await? {
                return Ok(());
            }
        }
        Ok(())
    }
    .await;
    match result {
        Ok(()) => tracing::info!(filter, generation = new.generation, "rebuild: abandoned its generation"),
        Err(e) => {
            tracing::warn!(filter, generation = new.generation, cause = %e, "rebuild: could not abandon its generation; the next rebuild will")
        }
    }
}

/// Retires a `previous` generation whose rebuild died before retiring it, under the lease.
/// Returns whether there was one to retire.
pub async fn retire_overdue_previous(
    filters: Arc<dyn FilterStore>,
    filter: &str,
    lease_ttl: Duration,
) -> Result<bool, RebuildError> {
    let owner = format!("{:016x}", rand::random::<u64>());
    if !filters.lease(filter, &owner, lease_ttl).await? {
        return Err(RebuildError::Busy);
    }
    let result = async {
        let state = filters.state_for_write(filter).await?;
        match state.previous {
            Some(old) => retire_previous(filters.as_ref(), filter, old).await.map(|_| true),
            None => Ok(false),
        }
    }
    .await;
    let _ = filters.release_lease(filter, &owner).await;
    result
}

/// How often a rebuild publishes its progress for stats.
const PUBLISH_EVERY: Duration = Duration::from_secs(1);

/// Publishes progress; a failure only leaves stats a step behind.
async fn publish(filters: &dyn FilterStore, filter: &str, progress: &BuildProgress) {
    if let Err(e) = filters.set_progress(filter, *progress).await {
        tracing::debug!(filter, cause = %e, "rebuild progress not published");
    }
}

/// How many keys the scan should find, for the ETA: the keys the active generation holds,
/// estimated from its fill (deleted keys included, so an upper bound). None when there is no
/// active generation (recovery).
async fn expected_keys(filters: &dyn FilterStore, filter: &str, state: &FilterState) -> Option<u64> {
    let active = state.readable()?;
    let ones = filters.count_ones(filter, active).await.ok()?;
    let estimate = active.params.estimated_len(ones);
    estimate.is_finite().then(|| estimate.round() as u64)
}

fn progress_bar(show: bool, expected: Option<u64>) -> ProgressBar {
    if !show {
        return ProgressBar::hidden();
    }
    let bar = match expected {
        Some(n) => ProgressBar::new(n),
        None => ProgressBar::no_length(),
    };
    let style = ProgressStyle::with_template("{spinner} {pos}/{len} keys  {per_sec}  eta {eta}  {elapsed}")
        .unwrap_or_else(|_| ProgressStyle::default_bar());
    bar.set_style(style);
    bar
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(generation: u64, incarnation: u64) -> Option<FilterMeta> {
        Some(FilterMeta { generation, params: Params::new(1, 6, 0, 1).unwrap(), incarnation, journal: true })
    }

    #[test]
    fn generations_only_grow() {
        assert_eq!(next_generation(&FilterState::default(), 1000), 1000);
        let state = FilterState { active: meta(5000, 1), previous: meta(4000, 1), ..FilterState::default() };
        assert_eq!(next_generation(&state, 1000), 5001, "a clock behind the newest generation");
        assert_eq!(next_generation(&state, 9000), 9000);
        let stale = FilterState { active: meta(7000, 2), read_from: 1, ..FilterState::default() };
        assert_eq!(next_generation(&stale, 1000), 7001, "a lost incarnation's numbers are never reused either");
        let recreated = FilterState { lineage: 8000, ..FilterState::default() };
        assert_eq!(next_generation(&recreated, 1000), 8000, "nor a dropped filter's, whose floor is the lineage");
    }

    #[test]
    fn a_rebuild_clears_what_dead_rebuilds_and_lost_incarnations_left() {
        let state = FilterState {
            active: meta(3, 1),
            building: meta(5, 1),
            previous: meta(2, 1),
            read_from: 1,
            ..FilterState::default()
        };
        let gone: Vec<u64> = leftovers(&state).iter().map(|m| m.generation).collect();
        assert_eq!(gone, [5, 2], "the active generation stays");
        let rolled_back =
            FilterState { active: meta(3, 1), building: meta(5, 2), read_from: 2, ..FilterState::default() };
        let gone: Vec<u64> = leftovers(&rolled_back).iter().map(|m| m.generation).collect();
        assert_eq!(gone, [3, 5], "bits of another incarnation, then the abandoned build");
        assert!(leftovers(&FilterState { active: meta(3, 1), read_from: 1, ..FilterState::default() }).is_empty());
    }
}
