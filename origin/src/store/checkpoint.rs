//! Checkpoints: a generation's segments saved in the database, each with the version it was
//! read at, and a record naming the generation and `R`, the clock reading taken before the
//! round began; so that recovery can load them into a new generation and replay only the writes
//! logged since (`recent_writes`), instead of scanning every key (docs/design.md, "Recovery
//! without a full scan"). Pure: which segments a round must save, and whether a checkpoint may
//! seed a recovery and from which moment its replay reads the log.
//!
//! Versioned from its first day: every record carries [`CHECKPOINT_FORMAT`], and one in a newer
//! format is not used (a full scan instead, never a guess).

use crate::cluster_version::{ClusterVersion, LOGS_RECENT_WRITES, VIEW_FRESH_FOR};
use crate::store::recent_writes::RETAINED;
use bloomgate_filter::Params;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// The format of the checkpoint records this build writes, and the newest it reads.
pub const CHECKPOINT_FORMAT: i32 = 1;

/// How long before the log's rows expire a checkpoint stops being used: the replay reads the
/// log well inside its retention, whatever the time the replay takes.
pub const EXPIRY_MARGIN: Duration = Duration::from_secs(600);

/// A filter's newest checkpoint, as recorded once a round saved every changed segment.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Checkpoint {
    /// The generation whose segments were saved.
    pub generation: u64,
    /// Its params (seed, sizing): a recovery names a generation of the same.
    pub params: Params,
    /// `R`: the checkpointer's clock before the round began (ms since the epoch). Every write
    /// acknowledged before it has its bits in the saved segments.
    pub taken_at_ms: u64,
}

/// A saved segment's label: the version of its bits when read, and the filter store
/// incarnation they were read from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SavedSegment {
    /// The segment's index.
    pub index: u32,
    /// Its version when read.
    pub version: u64,
    /// The incarnation it was read from.
    pub incarnation: u64,
}

/// The segments a round must save: those whose version or incarnation differs from what was
/// saved (a version is bumped by every change of a segment's bits, but counts again from an
/// older number in another incarnation), and those never saved.
pub fn segments_to_save(versions: &[u64], incarnation: u64, saved: &[SavedSegment]) -> Vec<u32> {
    (0..versions.len() as u32)
        .filter(|&index| {
            let now = versions[index as usize];
            !saved.iter().any(|s| s.index == index && s.version == now && s.incarnation == incarnation)
        })
        .collect()
}

/// Where a recovery's replay of the log starts, from a checkpoint it may use.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ReplayPlan {
    /// The checkpoint loaded first.
    pub checkpoint: Checkpoint,
    /// The log is replayed from this moment (ms since the epoch, an origin's clock).
    pub from_ms: u64,
}

/// Why a recovery scans every key instead of replaying from a checkpoint.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum NoReplay {
    /// No checkpoint was recorded (or it is in a newer format).
    #[error("no checkpoint")]
    NoCheckpoint,
    /// Not every origin logs its writes.
    #[error("the cluster is at version {0}: not every origin logs its writes (bloomgate-origin upgrade finish)")]
    NotLogged(u32),
    /// The replay would start before every origin was sure to log.
    #[error("the checkpoint is from before every origin logged its writes")]
    BeforeTheLog,
    /// The log may have expired since the checkpoint.
    #[error("the checkpoint is {age_s} s old: the log of writes since may have expired")]
    TooOld {
        /// Its age.
        age_s: u64,
    },
    /// The filter was resized since (or the checkpoint is of other sizing).
    #[error("the checkpoint's sizing is not the filter's")]
    Resized,
}

/// The margins a replay allows for: how long a write may run before it is acknowledged, and
/// how far apart two origins' clocks may be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplayMargins {
    /// `request_timeout_ms`: a write's log row is stamped at most this long before its
    /// acknowledgement.
    pub request_timeout: Duration,
    /// `delete_skew_margin_ms`: each origin's clock is within this of true time.
    pub clock_skew: Duration,
}

impl ReplayMargins {
    /// How far before `R` the replay starts: a write acknowledged after `R` was stamped at most
    /// a request's time earlier, by a clock at most two skews from the checkpointer's.
    pub fn before_checkpoint(&self) -> Duration {
        self.request_timeout + self.clock_skew * 2
    }
}

/// Whether `checkpoint` may seed a recovery of a filter whose sizing is `expected` (the
/// definition's params with the checkpoint's seed), under `cluster`, at `now_ms`.
pub fn replay_plan(
    checkpoint: Option<Checkpoint>,
    expected: Params,
    cluster: ClusterVersion,
    margins: ReplayMargins,
    now_ms: u64,
) -> Result<ReplayPlan, NoReplay> {
    let checkpoint = checkpoint.ok_or(NoReplay::NoCheckpoint)?;
    if cluster.version < LOGS_RECENT_WRITES {
        return Err(NoReplay::NotLogged(cluster.version));
    }
    let from_ms = checkpoint.taken_at_ms.saturating_sub(margins.before_checkpoint().as_millis() as u64);
    // Every origin logs from the raise on, once its view is current (or stale: then it logs
    // anyway), by a clock at most two skews off.
    let logged_since = cluster.raised_at_ms + (VIEW_FRESH_FOR + margins.clock_skew * 2).as_millis() as u64;
    if from_ms <= logged_since {
        return Err(NoReplay::BeforeTheLog);
    }
    let age = now_ms.saturating_sub(from_ms);
    if age >= RETAINED.saturating_sub(EXPIRY_MARGIN).as_millis() as u64 {
        return Err(NoReplay::TooOld { age_s: age / 1000 });
    }
    let sized = |p: &Params| (p.k, p.segment_blocks_log2, p.segment_count);
    if sized(&checkpoint.params) != sized(&expected) || checkpoint.params.seed != expected.seed {
        return Err(NoReplay::Resized);
    }
    Ok(ReplayPlan { checkpoint, from_ms })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MARGINS: ReplayMargins =
        ReplayMargins { request_timeout: Duration::from_secs(5), clock_skew: Duration::from_secs(1) };

    fn params(seed: u64) -> Params {
        Params { seed, k: 7, segment_blocks_log2: 10, segment_count: 4 }
    }

    fn checkpoint(taken_at_ms: u64) -> Checkpoint {
        Checkpoint { generation: 17, params: params(9), taken_at_ms }
    }

    const LOGGED_LONG_AGO: ClusterVersion = ClusterVersion { version: 2, raised_at_ms: 1_000 };

    #[test]
    fn a_round_saves_what_changed_or_was_never_saved_or_came_from_another_incarnation() {
        let saved = [
            SavedSegment { index: 0, version: 3, incarnation: 7 },
            SavedSegment { index: 1, version: 5, incarnation: 7 },
            SavedSegment { index: 2, version: 1, incarnation: 6 },
        ];
        assert_eq!(segments_to_save(&[3, 6, 1, 0], 7, &saved), [1, 2, 3]);
        assert_eq!(segments_to_save(&[3, 5], 7, &saved), Vec::<u32>::new());
        assert_eq!(segments_to_save(&[3, 5], 8, &saved), [0, 1], "another incarnation: everything again");
    }

    #[test]
    fn a_checkpoint_seeds_a_recovery_that_replays_from_before_it_by_the_margins() {
        let now = 10_000_000;
        let plan = replay_plan(Some(checkpoint(now - 60_000)), params(9), LOGGED_LONG_AGO, MARGINS, now).unwrap();
        assert_eq!(plan.from_ms, now - 60_000 - 7_000, "R less a request's time and two skews");
    }

    #[test]
    fn no_checkpoint_no_log_or_a_log_too_young_or_too_old_means_a_scan() {
        let now = 10_000_000;
        let ckpt = Some(checkpoint(now - 60_000));
        assert_eq!(replay_plan(None, params(9), LOGGED_LONG_AGO, MARGINS, now), Err(NoReplay::NoCheckpoint));
        let unlogged = ClusterVersion { version: 1, raised_at_ms: 0 };
        assert_eq!(replay_plan(ckpt, params(9), unlogged, MARGINS, now), Err(NoReplay::NotLogged(1)));
        // Raised just before the checkpoint: writes acknowledged before the origins read it may
        // not be logged.
        let just_raised = ClusterVersion { version: 2, raised_at_ms: now - 60_000 - 10_000 };
        assert_eq!(replay_plan(ckpt, params(9), just_raised, MARGINS, now), Err(NoReplay::BeforeTheLog));
        let raised_well_before = ClusterVersion { version: 2, raised_at_ms: now - 60_000 - 30_000 };
        assert!(replay_plan(ckpt, params(9), raised_well_before, MARGINS, now).is_ok());
        let old = Some(checkpoint(now - RETAINED.as_millis() as u64 + EXPIRY_MARGIN.as_millis() as u64));
        assert!(matches!(replay_plan(old, params(9), LOGGED_LONG_AGO, MARGINS, now), Err(NoReplay::TooOld { .. })));
    }

    #[test]
    fn a_resized_filter_is_scanned() {
        let now = 10_000_000;
        let ckpt = Some(checkpoint(now - 60_000));
        let bigger = Params { segment_count: 8, ..params(9) };
        assert_eq!(replay_plan(ckpt, bigger, LOGGED_LONG_AGO, MARGINS, now), Err(NoReplay::Resized));
    }
}
