//! The facts, gathered: a filter's state, lease, fill, false positives and deletes, read from
//! the stores and this origin's counters (and exported as gauges and status samples on the way).

use super::reason::Health;
use crate::gate::Gate;
use crate::metrics::{FilterGauges, RebuildGauges};
use crate::status_history::{RebuildSample, Sample};
use crate::store::{FilterDef, FilterUnavailable, StoreResult};
use bloomgate_filter::{Params, SizingOptions};

/// Segments counted per check for the fill estimate: enough for a tight estimate (each
/// segment holds tens of thousands of keys), few enough that the check costs the same at any
/// filter size.
const FILL_SAMPLE_SEGMENTS: u32 = 16;

/// Gathers a filter's health from the stores and this origin's counters.
pub async fn health(gate: &Gate, def: &FilterDef, max_filter_bytes: u64) -> StoreResult<Health> {
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
    let negatives = c.filter_negatives.get() - since.negatives;
    let false_positives = c.false_positives.get() - since.false_positives;
    let absent_lookups = negatives + false_positives;
    (h.absent_keys, h.false_positive_keys) = c.distinct_since(active.generation);
    h.active_age_ms = crate::clock::now_ms().saturating_sub(active.generation);
    let gauges = FilterGauges {
        fill_ratio: ones / active.params.total_bits() as f64,
        estimated_keys: h.estimated_keys,
        capacity: h.capacity,
        target_fp_rate: h.target_fp,
        expected_fp_rate: active.params.expected_fp_rate(h.estimated_keys.round() as u64),
        observed_fp_rate: (absent_lookups > 0).then(|| false_positives as f64 / absent_lookups as f64),
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
