//! The checkpointer: every interval, a checkpoint round of every filter (`Gate::checkpoint_round`),
//! one filter at a time, so the rounds' reads of Redis and writes to Cassandra stay bounded.
//! Every origin runs it; a filter checkpointed lately by any origin is skipped, and origins
//! start at a random point of the interval, so they take turns.

use crate::cluster_version::Standing;
use crate::gate::{CheckpointRound, Gate};
use crate::metrics::CheckpointResult;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Runs checkpoint rounds every `interval` until the process ends.
pub async fn run(gate: Arc<Gate>, interval: Duration) {
    tokio::time::sleep(interval.mul_f64(rand::random::<f64>())).await;
    loop {
        let started = Instant::now();
        // An origin behind the cluster writes nothing, checkpoints included.
        if matches!(gate.cluster().standing(), Standing::Known { .. }) {
            round(&gate, interval).await;
        }
        tokio::time::sleep(interval.saturating_sub(started.elapsed()).max(interval / 10)).await;
    }
}

async fn round(gate: &Gate, interval: Duration) {
    let defs = match gate.filter_defs().await {
        Ok(defs) => defs,
        Err(e) => return tracing::debug!(cause = %e, "checkpoints: cannot list filters"),
    };
    for def in defs {
        let result = match gate.checkpoint_round(&def, interval).await {
            Ok(CheckpointRound::Recorded { generation, saved, segments }) => {
                tracing::debug!(filter = %def.name, generation, saved, segments, "checkpoint recorded");
                CheckpointResult::Recorded
            }
            Ok(CheckpointRound::Skipped(why)) => {
                tracing::trace!(filter = %def.name, why, "checkpoint skipped");
                CheckpointResult::Skipped
            }
            Err(e) => {
                tracing::debug!(filter = %def.name, cause = %e, "checkpoint round failed");
                CheckpointResult::Failed
            }
        };
        gate.metrics.recoveries.round(result);
    }
}
