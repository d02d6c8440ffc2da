//! Phases 2 and 3: every key of the filter scanned from the database into new bits in this
//! process, then the bits ORed into the named generation segment by segment (keeping the adds
//! made meanwhile). A filter larger than the rebuild's memory budget is built in runs of
//! segments (`bloomgate_filter::segment_runs`), each from a scan of its own that keeps only the
//! keys whose bits lie in it: memory stays bounded at any size. The progress is published to
//! the filter store as it goes, for every origin's stats, and drawn as a bar for the `rebuild`
//! command.

use super::{RebuildError, RebuildOptions};
use crate::build_progress::{BuildPhase, BuildProgress};
use crate::clock::now_ms;
use crate::store::{Database, FilterState, Generation, LifecycleStore, StatsStore};
use bloomgate_filter::SegmentRun;
use indicatif::{ProgressBar, ProgressStyle};
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How often a rebuild publishes its progress for stats.
const PUBLISH_EVERY: Duration = Duration::from_secs(1);

/// A rebuild's progress and where it is published.
pub(super) struct Published<'a> {
    store: &'a dyn LifecycleStore,
    filter: &'a str,
    progress: BuildProgress,
    /// Whether it is published (a helper building one run keeps its progress to itself: the
    /// rebuild that started it publishes the whole).
    public: bool,
}

impl<'a> Published<'a> {
    /// The progress of a rebuild of `new` that starts settling now, published, with the keys
    /// its `scans` should find (`before`'s active generation's, once per scan, for the ETA).
    pub async fn settling(
        store: &'a dyn LifecycleStore,
        stats: &dyn StatsStore,
        filter: &'a str,
        new: Generation,
        before: &FilterState,
        scans: usize,
    ) -> Published<'a> {
        let keys_expected = expected_keys(stats, filter, before).await.map(|n| n * scans as u64);
        let progress = BuildProgress {
            generation: new.generation,
            phase: BuildPhase::Settling,
            keys_scanned: 0,
            keys_expected,
            started_ms: now_ms(),
            updated_ms: now_ms(),
        };
        let published = Published { store, filter, progress, public: true };
        published.publish().await;
        published
    }

    /// The progress of a helper's run of `new`, not published.
    pub fn unpublished(store: &'a dyn LifecycleStore, filter: &'a str, new: Generation) -> Published<'a> {
        let progress = BuildProgress {
            generation: new.generation,
            phase: BuildPhase::Scanning,
            keys_scanned: 0,
            keys_expected: None,
            started_ms: now_ms(),
            updated_ms: now_ms(),
        };
        Published { store, filter, progress, public: false }
    }

    /// Counts keys that scans elsewhere read (runs helpers built), for the progress.
    pub fn add_scanned_elsewhere(&mut self, keys: u64) {
        self.progress.keys_scanned += keys;
    }

    /// Publishes the progress as it stands; a failure only leaves stats a step behind.
    async fn publish(&self) {
        if !self.public {
            return;
        }
        if let Err(e) = self.store.set_progress(self.filter, self.progress).await {
            tracing::debug!(filter = self.filter, cause = %e, "rebuild progress not published");
        }
    }

    /// Publishes the progress now, `keys_scanned` so far.
    async fn update(&mut self, keys_scanned: u64) {
        self.progress.keys_scanned = keys_scanned;
        self.progress.updated_ms = now_ms();
        self.publish().await;
    }
}

/// A scan's result: the bits of a run of segments, the keys scanned, and how long it took.
pub(super) struct Scanned {
    /// The new generation's bits for the run's segments, built in this process.
    pub bits: SegmentRun,
    /// Keys scanned (every key of the filter, whether its bits are in the run or not).
    pub count: u64,
    /// Seconds the scan took.
    pub secs: f64,
}

/// Scans every key of the filter into new bits of `new`'s params for the segments `run`.
pub(super) async fn scan(
    keys: &dyn Database,
    options: &RebuildOptions,
    new: Generation,
    run: Range<u32>,
    published: &mut Published<'_>,
) -> Result<Scanned, RebuildError> {
    let started = Instant::now();
    let bits = SegmentRun::try_new(new.params, run)?;
    // Counted across scans, for the progress: the ETA expects one pass over the keys per run.
    let before = published.progress.keys_scanned;
    let scanned = AtomicU64::new(before);
    let bar = keys_bar(options.progress, published.progress.keys_expected);
    bar.set_position(before);
    let now = now_ms();
    // The rate (and so the ETA) is counted from the first scan's start.
    let started_ms = if published.progress.phase == BuildPhase::Settling { now } else { published.progress.started_ms };
    published.progress =
        BuildProgress { phase: BuildPhase::Scanning, started_ms, updated_ms: now, ..published.progress };
    published.publish().await;
    let count = {
        let sink = |key: &[u8]| {
            bits.insert_shared(key);
            let n = scanned.fetch_add(1, Ordering::Relaxed) + 1;
            if n.is_multiple_of(4096) {
                bar.set_position(n);
            }
        };
        let scan = keys.scan_keys(published.filter, options.concurrency, &sink);
        tokio::pin!(scan);
        loop {
            match tokio::time::timeout(PUBLISH_EVERY, &mut scan).await {
                Ok(result) => break result?,
                Err(_) => published.update(scanned.load(Ordering::Relaxed)).await,
            }
        }
    };
    bar.set_position(before + count);
    bar.finish_and_clear();
    // Where the scan ended, whatever its last publication said mid-scan: the upload publishes
    // this, and the next run's scan counts on from it.
    published.progress.keys_scanned = before + count;
    Ok(Scanned { bits, count, secs: started.elapsed().as_secs_f64() })
}

/// ORs the scanned run's bits into `new`, segment by segment, unless the lease is `lost`; the
/// seconds it took. The bits are dropped after: the next run, and the grace period, do not
/// hold them.
pub(super) async fn upload(
    new: Generation,
    scanned: Scanned,
    lost: &AtomicBool,
    published: &mut Published<'_>,
) -> Result<f64, RebuildError> {
    let uploading = Instant::now();
    let keys_scanned = published.progress.keys_scanned;
    published.progress.phase = BuildPhase::Uploading;
    published.update(keys_scanned).await;
    let mut last_publish = Instant::now();
    for index in scanned.bits.segments() {
        if lost.load(Ordering::SeqCst) {
            return Err(RebuildError::LeaseLost);
        }
        let payload = scanned.bits.segment_payload(index).unwrap_or_default();
        published.store.merge_segment(published.filter, new, index, payload).await?;
        if last_publish.elapsed() >= PUBLISH_EVERY {
            published.update(keys_scanned).await;
            last_publish = Instant::now();
        }
    }
    Ok(uploading.elapsed().as_secs_f64())
}

/// How many keys the scan should find, for the ETA: the keys the active generation holds,
/// estimated from its fill (deleted keys included, so an upper bound). None when there is no
/// active generation (recovery).
async fn expected_keys(stats: &dyn StatsStore, filter: &str, state: &FilterState) -> Option<u64> {
    let active = state.readable()?;
    let ones = stats.count_ones(filter, active).await.ok()?;
    let estimate = active.params.estimated_len(ones);
    estimate.is_finite().then(|| estimate.round() as u64)
}

fn keys_bar(show: bool, expected: Option<u64>) -> ProgressBar {
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
