//! A rebuild's runs of segments, built by whoever claims them. The rebuild that named the
//! generation posts its runs on a board (`store::run_board`, which argues why no key is lost),
//! then claims and builds them one at a time, counting the runs other origins built and
//! waiting for those they still hold; other origins' recovery checks find the board and build
//! a run each (`help`). A claim expires unless renewed, so a builder that died only delays its
//! run until someone claims it again.

use super::fill::{self, Published};
use super::{RebuildError, RebuildOptions};
use crate::store::run_board::RunPlan;
use crate::store::{Database, Generation, LifecycleStore};
use std::collections::BTreeSet;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// How often a rebuild whose remaining runs are all claimed elsewhere looks at the board again.
const WAIT_FOR_HELPERS: Duration = Duration::from_millis(500);

/// What building every run came to.
#[derive(Default)]
pub(super) struct Built {
    /// Keys the scans read (the most any one read: writes go on meanwhile).
    pub keys: u64,
    /// Seconds this process spent scanning.
    pub scan_secs: f64,
    /// Seconds this process spent merging.
    pub upload_secs: f64,
    /// Bytes of bits one run held in this process, at most.
    pub held_bytes: u64,
    /// Runs this process built.
    pub runs_here: usize,
    /// Runs other processes built.
    pub runs_elsewhere: usize,
}

/// One claimed run, built.
pub(super) struct BuiltRun {
    /// Keys its scan read.
    pub keys: u64,
    pub scan_secs: f64,
    pub upload_secs: f64,
    pub held_bytes: u64,
}

/// Where the runs are built: the stores, the filter and its new generation, and the claim's
/// owner and expiry.
pub(super) struct Builder<'a> {
    pub store: &'a dyn LifecycleStore,
    pub keys: &'a dyn Database,
    pub filter: &'a str,
    pub new: Generation,
    pub options: &'a RebuildOptions,
    pub owner: String,
}

impl Builder<'_> {
    /// Every run of `runs` built, here or elsewhere, unless the rebuild's lease is `lost`.
    pub async fn build_all(
        &self,
        runs: &[Range<u32>],
        lost: &AtomicBool,
        published: &mut Published<'_>,
    ) -> Result<Built, RebuildError> {
        let run_bytes = runs.iter().map(|r| u64::from(r.len() as u32) * self.new.params.segment_bytes()).max();
        let plan = RunPlan::new(runs.to_vec(), run_bytes.unwrap_or(0));
        if let Err(e) = self.store.post_runs(self.filter, self.new.generation, &plan).await {
            tracing::warn!(filter = self.filter, cause = %e, "rebuild: runs not posted for other origins; building them all here");
        }
        let result = self.claim_and_build(runs, lost, published).await;
        if let Err(e) = self.store.withdraw_runs(self.filter, self.new.generation).await {
            tracing::debug!(filter = self.filter, cause = %e, "rebuild: board of runs left to expire");
        }
        result
    }

    async fn claim_and_build(
        &self,
        runs: &[Range<u32>],
        lost: &AtomicBool,
        published: &mut Published<'_>,
    ) -> Result<Built, RebuildError> {
        let (filter, generation) = (self.filter, self.new.generation);
        let mut built = Built::default();
        let (mut here, mut counted_elsewhere) = (BTreeSet::new(), BTreeSet::new());
        loop {
            if lost.load(Ordering::SeqCst) {
                return Err(RebuildError::LeaseLost);
            }
            // A board that cannot be read is an empty one: this process builds what is left.
            let done_elsewhere = match self.store.run_board(filter, generation).await {
                Ok(Some(board)) => board.done,
                Ok(None) | Err(_) => Default::default(),
            };
            for (&index, &keys) in &done_elsewhere {
                if !here.contains(&index) && counted_elsewhere.insert(index) {
                    published.add_scanned_elsewhere(keys);
                    built.keys = built.keys.max(keys);
                    built.runs_elsewhere += 1;
                }
            }
            let left: Vec<u32> =
                (0..runs.len() as u32).filter(|i| !here.contains(i) && !done_elsewhere.contains_key(i)).collect();
            if left.is_empty() {
                return Ok(built);
            }
            let mut claimed = None;
            for index in left {
                if self.store.claim_run(filter, generation, index, &self.owner, self.options.lease_ttl).await? {
                    claimed = Some(index);
                    break;
                }
            }
            let Some(index) = claimed else {
                tokio::time::sleep(WAIT_FOR_HELPERS).await;
                continue;
            };
            // A helper may have finished the run (and let its claim go) between the board read
            // above and the claim: read it again rather than build the run twice. The claim is
            // left to expire: nobody claims a run marked done.
            if self.done_on_board(index).await {
                continue;
            }
            let run = runs[index as usize].clone();
            if runs.len() > 1 {
                tracing::info!(filter, generation, run = index + 1, of = runs.len(), segments = ?run, "rebuild: scanning for a run of segments");
            }
            let one = self.build_claimed(index, run, lost, published).await?;
            if let Err(e) = self.store.finish_run(filter, generation, index, &self.owner, one.keys).await {
                tracing::debug!(filter, cause = %e, "rebuild: run not marked done on the board (built here all the same)");
            }
            here.insert(index);
            built.runs_here += 1;
            built.keys = built.keys.max(one.keys);
            built.scan_secs += one.scan_secs;
            built.upload_secs += one.upload_secs;
            built.held_bytes = built.held_bytes.max(one.held_bytes);
        }
    }

    /// Whether run `index` is marked done on the board (false when the board cannot be read).
    async fn done_on_board(&self, index: u32) -> bool {
        matches!(
            self.store.run_board(self.filter, self.new.generation).await,
            Ok(Some(board)) if board.done.contains_key(&index)
        )
    }

    /// Run `index` (segments `run`), claimed by this builder: scanned and merged while the claim
    /// is renewed. Stops before merging on if the claim or the rebuild's lease (`lease_lost`) is
    /// lost; then the run is left for the next claim.
    pub async fn build_claimed(
        &self,
        index: u32,
        run: Range<u32>,
        lease_lost: &AtomicBool,
        published: &mut Published<'_>,
    ) -> Result<BuiltRun, RebuildError> {
        let lost = AtomicBool::new(lease_lost.load(Ordering::SeqCst));
        let work = async {
            let scanned = fill::scan(self.keys, self.options, self.new, run, published).await?;
            let (keys, scan_secs, held_bytes) = (scanned.count, scanned.secs, scanned.bits.bytes());
            let upload_secs = fill::upload(self.new, scanned, &lost, published).await?;
            Ok::<_, RebuildError>(BuiltRun { keys, scan_secs, upload_secs, held_bytes })
        };
        tokio::pin!(work);
        let ttl = self.options.lease_ttl;
        loop {
            tokio::select! {
                done = &mut work => return done,
                () = tokio::time::sleep(ttl / 3) => {
                    let renewed = self.store.claim_run(self.filter, self.new.generation, index, &self.owner, ttl).await;
                    if !matches!(renewed, Ok(true)) || lease_lost.load(Ordering::SeqCst) {
                        lost.store(true, Ordering::SeqCst);
                    }
                }
            }
        }
    }
}

/// A new claimant's name, unique enough among origins.
pub(super) fn new_owner() -> String {
    format!("{:016x}", rand::random::<u64>())
}
