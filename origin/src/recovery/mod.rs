//! The filter's self-care: a background check that starts a rebuild when the bits are lost
//! (Redis restarted empty or from a snapshot, failed over, metadata or a segment missing, a
//! rebuild that died) or no longer good enough (more keys than capacity, false positives above
//! target, many deleted keys still set). The decision is
//! [`rebuild_reason`], pure; the loop around it only gathers facts and starts rebuilds, under
//! the lease (so many origins start one rebuild) and with backoff after failures.

//!
//! # Layout
//! - `reason`: the decision, pure, and the thresholds it weighs.
//! - `health`: the facts it weighs, gathered from the stores and this origin's counters.
//! - [`checkpoints`]: the checkpointer, which keeps every filter's checkpoint recent, so that a
//!   recovery of lost bits starts from it instead of a scan.
//! - Here: the loop, which starts rebuilds.

pub mod checkpoints;
mod health;
mod reason;

pub use health::health;
pub use reason::{rebuild_reason, to_start, Action, Health, Thresholds, Urgency};

use crate::gate::{Gate, RebuildTask};
use crate::metrics::RecoverySource;
use crate::rebuild::{self, RebuildOptions};
use futures::FutureExt;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
/// Shortest time between two checks started by nudges.
const NUDGE_MIN_GAP: Duration = Duration::from_millis(250);

/// Runs the check every `interval` until the process ends, with at most `max_rebuilds` rebuilds
/// of its own at once (see [`to_start`]).
pub async fn run(
    gate: Arc<Gate>,
    thresholds: Thresholds,
    interval: Duration,
    options: RebuildOptions,
    max_rebuilds: usize,
) {
    let mut backoff: HashMap<String, (Instant, Duration)> = HashMap::new();
    let mut running: HashMap<String, (RebuildTask, Urgency)> = HashMap::new();
    // At most one run of another origin's rebuild built here at a time.
    let mut helping: Option<tokio::task::JoinHandle<()>> = None;
    loop {
        // Every interval, or sooner when a lookup or write found the filter lost (a flushed or
        // restarted Redis should not wait out the interval), but not more often than
        // NUDGE_MIN_GAP however many requests nudge.
        tokio::select! {
            () = tokio::time::sleep(interval) => {}
            () = gate.recovery_nudge.notified() => tokio::time::sleep(NUDGE_MIN_GAP.min(interval)).await,
        }
        // Collect finished rebuilds: reset counters on success, back off on failure.
        running.retain(|name, (task, urgency)| {
            if !task.is_finished() {
                return true;
            }
            if let Some(Ok(Ok(report))) = task.now_or_never() {
                count_recovery(&gate, &report, *urgency);
            }
            let entry = backoff.entry(name.clone()).or_insert((Instant::now(), Duration::from_secs(2)));
            entry.0 = Instant::now() + entry.1;
            entry.1 = (entry.1 * 2).min(Duration::from_secs(300));
            false
        });
        let defs = match gate.filter_defs().await {
            Ok(defs) => defs,
            Err(e) => {
                tracing::debug!(cause = %e, "recovery check: cannot list filters");
                continue;
            }
        };
        let mut due = Vec::new();
        let mut built_elsewhere = Vec::new();
        for def in defs {
            if running.contains_key(&def.name)
                || backoff.get(&def.name).is_some_and(|(until, _)| Instant::now() < *until)
            {
                continue;
            }
            let Ok(h) = health(&gate, &def, options.max_filter_bytes).await else { continue };
            if h.building {
                built_elsewhere.push(def.name.clone());
            }
            let Some(action) = rebuild_reason(&h, &thresholds) else {
                if !h.meta_missing && !h.segment_missing {
                    backoff.remove(&def.name);
                }
                continue;
            };
            if action.retire_only {
                match gate.retire_overdue_previous(&def.name, options.lease_ttl).await {
                    Ok(true) => {
                        tracing::info!(filter = %def.name, reason = action.reason, "retired a replaced generation")
                    }
                    Ok(false) | Err(rebuild::RebuildError::Busy) => {}
                    Err(e) => tracing::warn!(filter = %def.name, cause = %e, "could not retire a replaced generation"),
                }
                continue;
            }
            due.push((def.name, action));
        }
        for (name, action) in to_start(due, running.len(), max_rebuilds) {
            // Only lost bits are recovered from a checkpoint: a resize or drift needs a scan.
            let lost = action.urgency == Urgency::LostBits;
            let replay = options.replay.filter(|_| lost);
            // A generation whose bits or journal were lost is retired at once after the switch:
            // no reader can trust it, and one that lost its journal would refuse every write
            // that still reaches it (an add must append to it) for the whole grace period.
            let grace = if lost { Duration::ZERO } else { options.grace };
            let options = RebuildOptions { capacity: action.capacity, replay, grace, ..options.clone() };
            match gate.start_rebuild(&name, options).await {
                Ok(task) => {
                    tracing::warn!(filter = %name, reason = action.reason, "started an automatic rebuild");
                    running.insert(name, (task, action.urgency));
                }
                Err(rebuild::RebuildError::Busy) => {} // another origin is on it
                Err(e) => tracing::warn!(filter = %name, cause = %e, "could not start a rebuild"),
            }
        }
        let helpable: Vec<String> = built_elsewhere.into_iter().filter(|name| !running.contains_key(name)).collect();
        if !helpable.is_empty() && helping.as_ref().is_none_or(|task| task.is_finished()) {
            helping = Some(tokio::spawn(help_one(gate.clone(), helpable, options.clone())));
        }
    }
}

/// Builds one run of the first of `filters` (each rebuilt by another process) whose rebuild
/// has a run left to claim (see `rebuild::help`).
async fn help_one(gate: Arc<Gate>, filters: Vec<String>, options: RebuildOptions) {
    for name in filters {
        match gate.help_rebuild(&name, &options).await {
            Ok(Some(run)) => {
                tracing::info!(filter = %name, generation = run.generation, run = run.index + 1, keys = run.keys, "built a run of another origin's rebuild");
                return;
            }
            Ok(None) => {}
            Err(e) => {
                tracing::debug!(filter = %name, cause = %e, "could not help a rebuild");
                return;
            }
        }
    }
}

/// Counts a finished recovery of lost bits by what it was built from.
fn count_recovery(gate: &Gate, report: &rebuild::RebuildReport, urgency: Urgency) {
    if urgency != Urgency::LostBits {
        return;
    }
    let source = match report.source {
        "checkpoint" => RecoverySource::Checkpoint,
        _ => RecoverySource::Scan,
    };
    gate.metrics.recoveries.recovered(source);
    gate.metrics.recoveries.replayed_keys.inc_by(report.replayed_keys);
}

#[cfg(test)]
mod tests;
