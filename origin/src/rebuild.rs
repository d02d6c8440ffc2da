//! Online rebuild: a new generation built from the key store while lookups and writes go on,
//! then switched to atomically. Drops the bits of deleted keys, changes size, and recovers a
//! filter whose bits were lost.
//!
//! Why no acknowledged key is missed (the argument the tests check):
//! 1. The new generation is created and named `building` in the filter state *before* the
//!    scan. Every write reads the state fresh (never cached) and adds to every generation it
//!    names, so a write that read the state after step 1 reaches the new generation itself.
//! 2. A write that read the state *before* step 1 may miss the new generation, but it is
//!    acknowledged only after its key store write, and every write ends within the request
//!    timeout. The scan starts after waiting out that time (`settle`), so it reads such keys
//!    from the key store.
//! 3. The scan's bits are ORed into the new generation (never overwriting the adds made
//!    meanwhile), and only then does the state switch `active` to it, in one atomic step.
//!
//! The old generation stays `previous` for `grace` (longer than edges' freshness bound and the
//! origins' metadata cache), so readers still holding it keep working, then it is deleted.
//! One rebuild per filter at a time: a lease with expiry in the filter store.

use crate::build_progress::{BuildPhase, BuildProgress};
use crate::store::{FilterMeta, FilterState, FilterStore, FilterUnavailable, KeyStore, KeyStoreError};
use bloomgate_filter::{BloomFilter, Params, SizingOptions};
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
    /// Concurrent scans of the key store.
    pub concurrency: usize,
    /// Wait between naming the new generation and scanning: at least the longest a write
    /// can take (request timeout).
    pub settle: Duration,
    /// How long the replaced generation is kept after the switch.
    pub grace: Duration,
    /// Lease expiry; renewed while the rebuild runs.
    pub lease_ttl: Duration,
    /// Draw a progress bar on stderr.
    pub progress: bool,
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
    /// The filter store failed.
    #[error("filter store: {0}")]
    Filter(#[from] FilterUnavailable),
    /// The key store failed.
    #[error("key store: {0}")]
    Keys(#[from] KeyStoreError),
    /// The lease was lost (expired or taken) mid-rebuild; nothing was switched.
    #[error("the rebuild lease was lost before the switch; nothing was switched")]
    LeaseLost,
}

/// Takes the lease and runs the rebuild in the background; `Busy` if another holds it.
pub async fn start(
    filters: Arc<dyn FilterStore>,
    keys: Arc<dyn KeyStore>,
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
    keys: Arc<dyn KeyStore>,
    filter: &str,
    options: RebuildOptions,
) -> Result<RebuildReport, RebuildError> {
    start(filters, keys, filter.to_owned(), options).await?.await.unwrap_or(Err(RebuildError::LeaseLost))
}

async fn run_leased(
    filters: &Arc<dyn FilterStore>,
    keys: &Arc<dyn KeyStore>,
    filter: &str,
    owner: &str,
    options: &RebuildOptions,
) -> Result<RebuildReport, RebuildError> {
    let lost = Arc::new(AtomicBool::new(false));
    let renewer = {
        let (filters, filter, owner, lost, ttl) =
            (filters.clone(), filter.to_owned(), owner.to_owned(), lost.clone(), options.lease_ttl);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(ttl / 3).await;
                if !matches!(filters.lease(&filter, &owner, ttl).await, Ok(true)) {
                    lost.store(true, Ordering::SeqCst);
                    return;
                }
            }
        })
    };
    let result = build_and_switch(filters, keys, filter, options, &lost).await;
    renewer.abort();
    result
}

/// The new generation's number: after the active one, and from the clock so it is never
/// reused even when the filter store lost every record of earlier ones.
fn next_generation(state: &FilterState, now_ms: u64) -> u64 {
    let newest = [state.active, state.building, state.previous].into_iter().flatten().map(|m| m.generation).max();
    now_ms.max(newest.map_or(0, |g| g + 1))
}

async fn build_and_switch(
    filters: &Arc<dyn FilterStore>,
    keys: &Arc<dyn KeyStore>,
    filter: &str,
    options: &RebuildOptions,
    lost: &AtomicBool,
) -> Result<RebuildReport, RebuildError> {
    let mut def = keys.filter(filter).await?.ok_or_else(|| RebuildError::UnknownFilter(filter.into()))?;
    if options.capacity.is_some() || options.fp_rate.is_some() {
        def.capacity = options.capacity.unwrap_or(def.capacity);
        def.fp_rate = options.fp_rate.unwrap_or(def.fp_rate);
        // Check the sizing before storing it.
        Params::for_capacity(def.capacity, def.fp_rate)?;
        keys.resize_filter(filter, def.capacity, def.fp_rate).await?;
    }
    let state = match filters.state(filter).await {
        Ok(state) => state,
        Err(FilterUnavailable::MetaMissing) => FilterState::default(), // recovery: bits lost
        Err(e) => return Err(e.into()),
    };
    if let Some(stale) = state.building {
        // A rebuild that died before its switch: its generation is incomplete, drop it.
        filters.delete_generation(filter, stale).await?;
    }
    let options_sizing = SizingOptions { seed: rand::random(), segment_bytes: def.segment_bytes };
    let params = Params::for_capacity_with(def.capacity, def.fp_rate, options_sizing)?;
    let new = FilterMeta { generation: next_generation(&state, crate::gate::now_ms()), params };
    filters.create_generation(filter, new).await?;
    filters.set_state(filter, FilterState { building: Some(new), ..state }).await?;
    tracing::info!(
        filter,
        generation = new.generation,
        settle_ms = options.settle.as_millis() as u64,
        "rebuild: new generation named; waiting out writes in flight"
    );
    let expected = expected_keys(filters.as_ref(), filter, &state).await;
    let mut progress = BuildProgress {
        generation: new.generation,
        phase: BuildPhase::Settling,
        keys_scanned: 0,
        keys_expected: expected,
        started_ms: crate::gate::now_ms(),
        updated_ms: crate::gate::now_ms(),
    };
    publish(filters.as_ref(), filter, &progress).await;
    tokio::time::sleep(options.settle).await;

    let started = Instant::now();
    let bits = BloomFilter::new_with_huge_pages(params);
    let scanned = AtomicU64::new(0);
    let bar = progress_bar(options.progress, expected);
    let now = crate::gate::now_ms();
    progress = BuildProgress { phase: BuildPhase::Scanning, started_ms: now, updated_ms: now, ..progress };
    publish(filters.as_ref(), filter, &progress).await;
    let sink = |key: &[u8]| {
        bits.insert_shared(key);
        let n = scanned.fetch_add(1, Ordering::Relaxed) + 1;
        if n.is_multiple_of(4096) {
            bar.set_position(n);
        }
    };
    let scan = keys.scan_keys(filter, options.concurrency, &sink);
    tokio::pin!(scan);
    let count = loop {
        match tokio::time::timeout(PUBLISH_EVERY, &mut scan).await {
            Ok(result) => break result?,
            Err(_) => {
                progress.keys_scanned = scanned.load(Ordering::Relaxed);
                progress.updated_ms = crate::gate::now_ms();
                publish(filters.as_ref(), filter, &progress).await;
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
        updated_ms: crate::gate::now_ms(),
        ..progress
    };
    publish(filters.as_ref(), filter, &progress).await;
    for index in 0..params.segment_count {
        if lost.load(Ordering::SeqCst) {
            return Err(RebuildError::LeaseLost);
        }
        filters.merge_segment(filter, new, index, bits.segment_payload(index)).await?;
    }
    let upload_secs = uploading.elapsed().as_secs_f64();

    // Switch, unless the state moved under us (it only moves under the lease).
    let now = filters.state(filter).await?;
    if now.building != Some(new) || lost.load(Ordering::SeqCst) {
        return Err(RebuildError::LeaseLost);
    }
    let replaced = now.active;
    filters.set_state(filter, FilterState { active: Some(new), building: None, previous: replaced }).await?;
    tracing::info!(
        filter,
        generation = new.generation,
        keys = count,
        scan_secs,
        "rebuild: switched to the new generation"
    );

    if let Some(old) = replaced {
        tokio::time::sleep(options.grace).await;
        filters.delete_generation(filter, old).await?;
        let latest = filters.state(filter).await?;
        if latest.previous == Some(old) {
            filters.set_state(filter, FilterState { previous: None, ..latest }).await?;
        }
    }
    Ok(RebuildReport {
        generation: new.generation,
        keys: count,
        scan_secs,
        keys_per_sec: count as f64 / scan_secs.max(1e-9),
        upload_secs,
        filter_bytes: params.total_bytes(),
    })
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
    let active = state.active?;
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

    #[test]
    fn generations_only_grow() {
        let params = Params::new(1, 6, 0, 1).unwrap();
        let meta = |g| Some(FilterMeta { generation: g, params });
        assert_eq!(next_generation(&FilterState::default(), 1000), 1000);
        let state = FilterState { active: meta(5000), building: None, previous: meta(4000) };
        assert_eq!(next_generation(&state, 1000), 5001, "a clock behind the newest generation");
        assert_eq!(next_generation(&state, 9000), 9000);
    }
}
