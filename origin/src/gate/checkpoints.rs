//! One checkpoint round of a filter (see `store::checkpoint` and docs/design.md, "Recovery
//! without a full scan"): `R` read first, then the segments of the active generation whose
//! version changed since they were saved, read from the filter store and saved in the database
//! at a bounded rate, then the checkpoint recorded with `R`. Every write acknowledged before `R`
//! added to the active generation before `R`; each segment is read after `R`, or was saved
//! earlier at the same version (so with the same bits): the saved bits hold the write.

use super::Gate;
use crate::clock::now_ms;
use crate::store::checkpoint::{segments_to_save, Checkpoint, SavedSegment};
use crate::store::{DatabaseError, FilterDef, FilterUnavailable};
use std::time::Duration;

/// The least time between two segments saved by one round: at most 100 segments a second
/// (6.4 MB/s of 64 KiB segments) per origin, whatever the filter's size.
const SEGMENT_PACE: Duration = Duration::from_millis(10);

/// What a checkpoint round did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CheckpointRound {
    /// A checkpoint was recorded.
    Recorded {
        /// The generation checkpointed.
        generation: u64,
        /// Segments saved this round (the others were saved earlier, unchanged since).
        saved: usize,
        /// Segments of the generation.
        segments: u32,
    },
    /// Nothing to do, and why.
    Skipped(&'static str),
}

/// Why a round stopped without a checkpoint.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// The database failed.
    #[error("database: {0}")]
    Database(#[from] DatabaseError),
    /// The filter store failed, or a segment was missing.
    #[error("filter store: {0}")]
    Filter(#[from] FilterUnavailable),
    /// The filter store restarted during the round.
    #[error("the filter store restarted during the round")]
    Restarted,
}

impl Gate {
    /// Checkpoints `def`'s active generation, unless a checkpoint younger than `interval` (by
    /// any origin) exists.
    pub async fn checkpoint_round(
        &self,
        def: &FilterDef,
        interval: Duration,
    ) -> Result<CheckpointRound, CheckpointError> {
        let name = def.name.as_str();
        let previous = self.database.checkpoint(name).await?;
        // Rounds of many origins take turns by the record's age; two at once are only
        // redundant: the later read of a segment wins, and so does the later `R`.
        let lately = (interval.as_millis() as u64).saturating_mul(9) / 10;
        if previous.is_some_and(|c| now_ms().saturating_sub(c.taken_at_ms) < lately) {
            return Ok(CheckpointRound::Skipped("checkpointed lately"));
        }
        let taken_at_ms = now_ms();
        let incarnation = self.store.lifecycle.incarnation().await?;
        let state = self.store.stats.state(name).await?;
        let Some(active) = state.readable() else { return Ok(CheckpointRound::Skipped("no readable generation")) };
        if active.incarnation != incarnation {
            return Ok(CheckpointRound::Skipped("the active generation is of another incarnation"));
        }
        let versions = self.store.edge_feed.segment_versions(name, active).await?;
        let saved = self.database.saved_segments(name, active.generation).await?;
        let to_save = segments_to_save(&versions, incarnation, &saved);
        for &index in &to_save {
            let read_at_ms = now_ms();
            let bits = self.store.copies.segment(name, active, index).await?;
            let segment = SavedSegment { index, version: bits.version, incarnation };
            self.database.save_segment(name, active.generation, segment, &bits.payload, read_at_ms).await?;
            tokio::time::sleep(SEGMENT_PACE).await;
        }
        // Every read above was guarded by the incarnation; this catches a restart after the last.
        if self.store.lifecycle.incarnation().await? != incarnation {
            return Err(CheckpointError::Restarted);
        }
        let checkpoint = Checkpoint { generation: active.generation, params: active.params, taken_at_ms };
        self.database.record_checkpoint(name, checkpoint).await?;
        if let Some(old) = previous.filter(|c| c.generation != active.generation) {
            self.database.forget_saved_segments(name, old.generation).await?;
        }
        self.metrics.recoveries.segments_saved.inc_by(to_save.len() as u64);
        Ok(CheckpointRound::Recorded {
            generation: active.generation,
            saved: to_save.len(),
            segments: active.params.segment_count,
        })
    }
}
