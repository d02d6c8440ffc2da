//! The filter's self-care: a background check that starts a rebuild when the bits are lost
//! (Redis restarted empty or from a snapshot, failed over, metadata or a segment missing, a
//! rebuild that died) or no longer good enough (more keys than capacity, false positives above
//! target, many deleted keys still set). The decision is
//! [`rebuild_reason`], pure; the loop around it only gathers facts and starts rebuilds, under
//! the lease (so many origins start one rebuild) and with backoff after failures.

use crate::config::Config;
use crate::gate::Gate;
use crate::metrics::{FilterGauges, RebuildGauges};
use crate::rebuild::{self, RebuildOptions};
use crate::status_history::{RebuildSample, Sample};
use crate::store::{FilterDef, FilterUnavailable};
use bloomgate_filter::{Params, SizingOptions};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// When to rebuild on its own.
#[derive(Clone, Copy, Debug)]
pub struct Thresholds {
    /// Resize (double capacity) when estimated keys exceed capacity × this.
    pub resize_at_fill: f64,
    /// Rebuild when the observed false-positive rate exceeds the target × this...
    pub fp_factor: f64,
    /// ...over at least this many lookups of absent keys.
    pub fp_min_samples: u64,
    /// Rebuild when keys deleted since the build exceed this share of the estimated keys.
    pub stale_delete_share: f64,
    /// A `previous` generation older than this is retired by any origin (its own rebuild
    /// should have retired it; it died).
    pub retire_previous_after_ms: u64,
}

impl Thresholds {
    /// The thresholds the configuration sets.
    pub fn from_config(config: &Config) -> Thresholds {
        Thresholds {
            resize_at_fill: config.auto_resize_at_fill,
            fp_factor: config.auto_fp_factor,
            fp_min_samples: config.auto_fp_min_samples,
            stale_delete_share: config.auto_stale_delete_share,
            // Its own rebuild retires `previous` after the grace period; one that is still
            // named well after that (grace twice over, plus a lease expiry) was orphaned.
            retire_previous_after_ms: 2 * config.rebuild_grace_ms + config.rebuild_lease_ms,
        }
    }
}

/// What the check saw for one filter.
#[derive(Clone, Copy, Debug, Default)]
pub struct Health {
    /// The filter store has no record of the filter (flushed, restarted empty).
    pub meta_missing: bool,
    /// A segment of the active generation is missing or short (evicted, deleted).
    pub segment_missing: bool,
    /// The active generation's bits belong to another Redis incarnation (restarted from a
    /// snapshot, failed over): they may have lost acknowledged adds.
    pub incarnation_changed: bool,
    /// A rebuild is running somewhere (its lease is held).
    pub building: bool,
    /// The filter is being dropped (its state is a tombstone): nothing to recover.
    pub dropped: bool,
    /// A generation is named `building` but no rebuild holds the lease: its rebuild died.
    pub building_abandoned: bool,
    /// Milliseconds since `previous` was replaced, if there is one.
    pub previous_age_ms: Option<u64>,
    /// A filter of twice the capacity is within the size limits (see `sizing`).
    pub doubled_fits: bool,
    /// Configured capacity.
    pub capacity: u64,
    /// Target false-positive rate.
    pub target_fp: f64,
    /// Keys estimated from the fill ratio.
    pub estimated_keys: f64,
    /// "No" answers of the filter since the build.
    pub negatives: u64,
    /// False positives since the build.
    pub false_positives: u64,
    /// Deletes since the build.
    pub deletes: u64,
}

/// Why to rebuild, and whether to resize.
#[derive(Clone, Debug, PartialEq)]
pub struct Action {
    /// Human-readable reason (logged, and in metrics).
    pub reason: &'static str,
    /// New capacity for a resize.
    pub capacity: Option<u64>,
    /// Only retire an overdue `previous` generation; no rebuild.
    pub retire_only: bool,
}

impl Action {
    fn rebuild(reason: &'static str) -> Option<Action> {
        Some(Action { reason, capacity: None, retire_only: false })
    }
}

/// The decision: lost bits first (correctness is not at stake, but every lookup pays the
/// database), then drift.
pub fn rebuild_reason(h: &Health, t: &Thresholds) -> Option<Action> {
    if h.building || h.dropped {
        return None;
    }
    if h.meta_missing {
        return Action::rebuild("filter metadata missing");
    }
    if h.incarnation_changed {
        return Action::rebuild("Redis restarted or failed over since the bits were written");
    }
    if h.building_abandoned {
        return Action::rebuild("a rebuild died before its switch");
    }
    if h.segment_missing {
        return Action::rebuild("filter segment missing");
    }
    if h.estimated_keys > h.capacity as f64 * t.resize_at_fill && h.doubled_fits {
        // Double, and leave room: twice the capacity, or twice the keys if they already
        // outgrew that.
        let doubled = h.capacity.saturating_mul(2).max((2.0 * h.estimated_keys).ceil() as u64);
        return Some(Action { reason: "more keys than capacity", capacity: Some(doubled), retire_only: false });
    }
    let absent_lookups = h.negatives + h.false_positives;
    if absent_lookups >= t.fp_min_samples
        && (h.false_positives as f64 / absent_lookups as f64) > h.target_fp * t.fp_factor
    {
        return Action::rebuild("observed false positives above target");
    }
    if h.estimated_keys > 0.0 && h.deletes as f64 > h.estimated_keys * t.stale_delete_share {
        return Action::rebuild("many deleted keys still set");
    }
    if h.previous_age_ms.is_some_and(|age| age > t.retire_previous_after_ms) {
        return Some(Action {
            reason: "replaced generation overdue for retirement",
            capacity: None,
            retire_only: true,
        });
    }
    None
}

/// Segments counted per check for the fill estimate: enough for a tight estimate (each
/// segment holds tens of thousands of keys), few enough that the check costs the same at any
/// filter size.
const FILL_SAMPLE_SEGMENTS: u32 = 16;

/// Gathers a filter's health from the stores and this origin's counters.
pub async fn health(gate: &Gate, def: &FilterDef, max_filter_bytes: u64) -> Result<Health, FilterUnavailable> {
    let store = gate.roles().stats.as_ref();
    let doubled = Params::for_capacity_with(
        def.capacity.saturating_mul(2),
        def.fp_rate,
        SizingOptions { seed: 0, segment_bytes: def.segment_bytes },
    );
    let mut h = Health {
        capacity: def.capacity,
        target_fp: def.fp_rate,
        doubled_fits: doubled.is_ok_and(|p| crate::sizing::check_size(&p, max_filter_bytes).is_ok()),
        ..Health::default()
    };
    let name = def.name.as_str();
    let state = match store.state_for_write(name).await {
        Ok(s) => s,
        Err(FilterUnavailable::MetaMissing) => {
            h.meta_missing = true;
            return Ok(h);
        }
        Err(e) => return Err(e),
    };
    if state.dropped.is_some() {
        h.dropped = true;
        return Ok(h);
    }
    h.building = store.lease_holder(name).await?.is_some();
    let rebuild = export_rebuild(gate, name, h.building).await;
    h.building_abandoned = state.building.is_some() && !h.building;
    h.incarnation_changed = state.stale().next().is_some();
    h.previous_age_ms = state.previous_since_ms.map(|at| crate::clock::now_ms().saturating_sub(at));
    let Some(active) = state.readable() else {
        h.meta_missing = !h.incarnation_changed && state.building.is_none();
        return Ok(h);
    };
    match store.segments_intact(name, active).await {
        Err(FilterUnavailable::SegmentMissing(_)) => {
            h.segment_missing = true;
            return Ok(h);
        }
        Err(e) => return Err(e),
        Ok(()) => {}
    }
    let (sampled_ones, counted) = store.count_ones_sampled(name, active, FILL_SAMPLE_SEGMENTS).await?;
    let ones = sampled_ones as f64 * f64::from(active.params.segment_count) / f64::from(counted.max(1));
    h.estimated_keys = active.params.estimated_len(ones.round() as u64);
    let c = gate.metrics.filters.counters(name);
    let since = c.build_baseline();
    h.negatives = c.filter_negatives.get() - since.negatives;
    h.false_positives = c.false_positives.get() - since.false_positives;
    let absent_lookups = h.negatives + h.false_positives;
    let gauges = FilterGauges {
        fill_ratio: ones / active.params.total_bits() as f64,
        estimated_keys: h.estimated_keys,
        capacity: h.capacity,
        target_fp_rate: h.target_fp,
        expected_fp_rate: active.params.expected_fp_rate(h.estimated_keys.round() as u64),
        observed_fp_rate: (absent_lookups > 0).then(|| h.false_positives as f64 / absent_lookups as f64),
    };
    gate.metrics.filters.set_gauges(name, &gauges);
    gate.status.record(
        name,
        Sample {
            at_ms: crate::clock::now_ms(),
            health: gauges,
            answered_by_filter: c.filter_negatives.get(),
            filter_maybes: c.filter_maybes.get(),
            false_positives: c.false_positives.get(),
            rebuild: rebuild.map(|r| RebuildSample {
                phase: r.phase,
                keys_scanned: r.keys_scanned,
                keys_expected: r.keys_expected.unwrap_or(0),
            }),
        },
    );
    h.deletes = store.deletes(name, active).await?;
    Ok(h)
}

/// Exports the filter's running rebuild (anywhere: its builder publishes progress to the filter
/// store), or that none runs, and returns it. Advisory: a failed read leaves the gauges as they
/// were.
async fn export_rebuild(gate: &Gate, name: &str, building: bool) -> Option<RebuildGauges> {
    let progress = match building {
        true => match gate.roles().stats.progress(name).await {
            Ok(p) => p,
            Err(_) => return None,
        },
        false => None,
    };
    let rebuild = progress.map(|p| RebuildGauges {
        phase: p.phase,
        keys_scanned: p.keys_scanned,
        keys_expected: p.keys_expected,
    });
    gate.metrics.rebuilds.set(name, rebuild);
    rebuild
}

/// Shortest time between two checks started by nudges.
const NUDGE_MIN_GAP: Duration = Duration::from_millis(250);

/// Runs the check every `interval` until the process ends.
pub async fn run(gate: Arc<Gate>, thresholds: Thresholds, interval: Duration, options: RebuildOptions) {
    let mut backoff: HashMap<String, (Instant, Duration)> = HashMap::new();
    let mut running: HashMap<String, tokio::task::JoinHandle<Result<rebuild::RebuildReport, rebuild::RebuildError>>> =
        HashMap::new();
    loop {
        // Every interval, or sooner when a lookup or write found the filter lost (a flushed or
        // restarted Redis should not wait out the interval), but not more often than
        // NUDGE_MIN_GAP however many requests nudge.
        tokio::select! {
            () = tokio::time::sleep(interval) => {}
            () = gate.recovery_nudge.notified() => tokio::time::sleep(NUDGE_MIN_GAP.min(interval)).await,
        }
        // Collect finished rebuilds: reset counters on success, back off on failure.
        running.retain(|name, task| {
            if !task.is_finished() {
                return true;
            }
            let entry = backoff.entry(name.clone()).or_insert((Instant::now(), Duration::from_secs(2)));
            entry.0 = Instant::now() + entry.1;
            entry.1 = (entry.1 * 2).min(Duration::from_secs(300));
            false
        });
        let defs = match gate.database().filters().await {
            Ok(defs) => defs,
            Err(e) => {
                tracing::debug!(cause = %e, "recovery check: cannot list filters");
                continue;
            }
        };
        for def in defs {
            if running.contains_key(&def.name)
                || backoff.get(&def.name).is_some_and(|(until, _)| Instant::now() < *until)
            {
                continue;
            }
            let Ok(h) = health(&gate, &def, options.max_filter_bytes).await else { continue };
            let Some(action) = rebuild_reason(&h, &thresholds) else {
                if !h.meta_missing && !h.segment_missing {
                    backoff.remove(&def.name);
                }
                continue;
            };
            if action.retire_only {
                match rebuild::retire_overdue_previous(gate.filter_store().clone(), &def.name, options.lease_ttl).await
                {
                    Ok(true) => {
                        tracing::info!(filter = %def.name, reason = action.reason, "retired a replaced generation")
                    }
                    Ok(false) | Err(rebuild::RebuildError::Busy) => {}
                    Err(e) => tracing::warn!(filter = %def.name, cause = %e, "could not retire a replaced generation"),
                }
                continue;
            }
            let options = RebuildOptions { capacity: action.capacity, ..options.clone() };
            match rebuild::start(gate.filter_store().clone(), gate.database().clone(), def.name.clone(), options).await
            {
                Ok(task) => {
                    tracing::warn!(filter = %def.name, reason = action.reason, "starting an automatic rebuild");
                    gate.metrics.filters.counters(&def.name).mark_build();
                    running.insert(def.name.clone(), task);
                }
                Err(rebuild::RebuildError::Busy) => {} // another origin is on it
                Err(e) => tracing::warn!(filter = %def.name, cause = %e, "could not start a rebuild"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Thresholds = Thresholds {
        resize_at_fill: 1.0,
        fp_factor: 3.0,
        fp_min_samples: 1000,
        stale_delete_share: 0.2,
        retire_previous_after_ms: 60_000,
    };

    fn healthy() -> Health {
        Health { capacity: 1000, target_fp: 0.01, estimated_keys: 500.0, doubled_fits: true, ..Health::default() }
    }

    #[test]
    fn healthy_filters_are_left_alone() {
        assert_eq!(rebuild_reason(&healthy(), &T), None);
    }

    #[test]
    fn lost_bits_rebuild_at_the_same_size() {
        let h = Health { meta_missing: true, ..healthy() };
        assert_eq!(rebuild_reason(&h, &T).unwrap().capacity, None);
        let h = Health { segment_missing: true, ..healthy() };
        assert!(rebuild_reason(&h, &T).is_some());
        let h = Health { meta_missing: true, building: true, ..healthy() };
        assert_eq!(rebuild_reason(&h, &T), None, "one rebuild at a time");
    }

    #[test]
    fn a_rolled_back_or_abandoned_filter_is_rebuilt() {
        let h = Health { incarnation_changed: true, ..healthy() };
        assert!(rebuild_reason(&h, &T).unwrap().reason.contains("restarted"));
        let h = Health { building_abandoned: true, ..healthy() };
        assert_eq!(rebuild_reason(&h, &T).unwrap().capacity, None, "a rebuild that died does not stop recovery");
        let h = Health { building_abandoned: true, building: true, ..healthy() };
        assert_eq!(rebuild_reason(&h, &T), None, "unless one is running now");
    }

    #[test]
    fn a_filter_being_dropped_is_never_rebuilt() {
        for h in [
            Health { dropped: true, meta_missing: true, ..healthy() },
            Health { dropped: true, estimated_keys: 5000.0, ..healthy() },
        ] {
            assert_eq!(rebuild_reason(&h, &T), None, "a rebuild would bring a dropped filter's bits back");
        }
    }

    #[test]
    fn a_resize_over_the_size_limit_is_not_started() {
        let h = Health { estimated_keys: 1001.0, doubled_fits: false, ..healthy() };
        assert_eq!(rebuild_reason(&h, &T), None);
    }

    #[test]
    fn an_overdue_replaced_generation_is_only_retired() {
        let h = Health { previous_age_ms: Some(61_000), ..healthy() };
        assert!(rebuild_reason(&h, &T).unwrap().retire_only);
        let h = Health { previous_age_ms: Some(1_000), ..healthy() };
        assert_eq!(rebuild_reason(&h, &T), None);
    }

    #[test]
    fn over_capacity_doubles() {
        let h = Health { estimated_keys: 1001.0, ..healthy() };
        assert_eq!(rebuild_reason(&h, &T).unwrap().capacity, Some(2002));
        let h = Health { estimated_keys: 900.0, capacity: 1000, ..healthy() };
        assert_eq!(rebuild_reason(&h, &T), None);
        let h = Health { estimated_keys: 4000.0, ..healthy() };
        assert_eq!(rebuild_reason(&h, &T).unwrap().capacity, Some(8000));
    }

    #[test]
    fn false_positives_need_enough_samples() {
        let h = Health { negatives: 900, false_positives: 99, ..healthy() };
        assert_eq!(rebuild_reason(&h, &T), None, "999 samples are not enough");
        let h = Health { negatives: 950, false_positives: 50, ..healthy() };
        assert!(rebuild_reason(&h, &T).is_some(), "5 % observed vs 1 % target");
        let h = Health { negatives: 990, false_positives: 10, ..healthy() };
        assert_eq!(rebuild_reason(&h, &T), None);
    }

    #[test]
    fn many_stale_deletes_rebuild() {
        let h = Health { deletes: 101, ..healthy() };
        assert!(rebuild_reason(&h, &T).is_some());
        let h = Health { deletes: 99, ..healthy() };
        assert_eq!(rebuild_reason(&h, &T), None);
    }
}
