//! Checkpoints and recoveries: checkpoint rounds by result, segments saved, and recoveries of
//! lost bits by what seeded them (a checkpoint and the log, or a scan of every key), with the
//! keys a replay added.

use super::{row, Row};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

label_enum!(
    /// How a checkpoint round ended.
    CheckpointResult {
        /// A checkpoint was recorded.
        Recorded => "recorded",
        /// Nothing to do (checkpointed lately by some origin, or no readable generation).
        Skipped => "skipped",
        /// A store failed, a segment was missing, or the filter store restarted meanwhile.
        Failed => "failed",
    }
);

label_enum!(
    /// What a recovery of lost bits was built from.
    RecoverySource {
        /// The newest checkpoint, then the writes logged since.
        Checkpoint => "checkpoint",
        /// A scan of every key (no usable checkpoint).
        Scan => "scan",
    }
);

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RoundLabels {
    result: CheckpointResult,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SourceLabels {
    source: RecoverySource,
}

/// The checkpoints' and recoveries' metrics.
pub struct RecoveryMetrics {
    rounds: Family<RoundLabels, Counter>,
    /// Segments saved by checkpoint rounds.
    pub segments_saved: Counter,
    recoveries: Family<SourceLabels, Counter>,
    /// Keys replayed from the log into recovered generations.
    pub replayed_keys: Counter,
}

impl RecoveryMetrics {
    pub(super) fn new() -> RecoveryMetrics {
        let (rounds, recoveries): (Family<RoundLabels, Counter>, Family<SourceLabels, Counter>) = Default::default();
        for result in CheckpointResult::ALL {
            let _ = rounds.get_or_create(&RoundLabels { result: *result });
        }
        for source in RecoverySource::ALL {
            let _ = recoveries.get_or_create(&SourceLabels { source: *source });
        }
        RecoveryMetrics { rounds, segments_saved: Counter::default(), recoveries, replayed_keys: Counter::default() }
    }

    /// Counts a checkpoint round.
    pub fn round(&self, result: CheckpointResult) {
        self.rounds.get_or_create(&RoundLabels { result }).inc();
    }

    /// Counts a recovery of lost bits, done.
    pub fn recovered(&self, source: RecoverySource) {
        self.recoveries.get_or_create(&SourceLabels { source }).inc();
    }

    pub(super) fn rows(&self) -> Vec<Row> {
        vec![
            row("checkpoint_rounds", "Checkpoint rounds of filters, by result.", &self.rounds),
            row("checkpoint_segments_saved", "Segments saved into checkpoints.", &self.segments_saved),
            row(
                "recoveries",
                "Filters recovered from lost bits, by what the new generation was built from.",
                &self.recoveries,
            ),
            row(
                "recovery_replayed_keys",
                "Keys added from the log of recent writes by recoveries.",
                &self.replayed_keys,
            ),
        ]
    }
}
