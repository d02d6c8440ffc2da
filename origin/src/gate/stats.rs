//! A filter's stats, the `nodetool tablestats` of a filter: its generations, fill, expected
//! and observed false-positive rates, stale deletes, journal, and a running rebuild's progress.

use super::Gate;
use crate::error::AppError;
use crate::lease::LeaseTerms;
use crate::metrics::FilterCounters;
use crate::store::{FilterState, FilterUnavailable, Generation, JournalSize};
use bloomgate_client::api::{FilterStats, RebuildProgress};

/// What the filter store says of the readable generation.
struct GenerationStats {
    meta: Generation,
    ones: u64,
    deletes: u64,
    memory: Option<u64>,
    journal: Option<JournalSize>,
}

impl Gate {
    /// The `nodetool tablestats` of a filter.
    pub async fn stats(&self, name: &str) -> Result<FilterStats, AppError> {
        let def = self.def(name).await?;
        // Under the write timeout: stats may wait, and are most wanted when Redis is busiest
        // (a rebuild under write load), where the lookup timeout would turn them into 503s.
        let state = self.store.stats.state_for_write(name).await.map_err(AppError::FilterRead)?;
        if state.dropped.is_some() {
            return Err(AppError::UnknownFilter(name.into()));
        }
        let known = FilterStats {
            filter: name.to_owned(),
            key_format: Some(def.key_format.to_string()),
            capacity: Some(def.capacity),
            target_fp_rate: Some(def.fp_rate),
            building_generation: state.building.map(|m| m.generation),
            rebuild: self.published_rebuild(name, &state).await,
            ..FilterStats::default()
        };
        let Some(meta) = state.readable() else { return unbuilt(known, &state) };
        let generation = self.generation(name, meta).await?;
        Ok(describe(known, &state, &generation, &self.metrics.filters.counters(name), def.capacity))
    }

    /// The progress a running rebuild of the state's `building` generation published, if any.
    async fn published_rebuild(&self, name: &str, state: &FilterState) -> Option<RebuildProgress> {
        let building = state.building?;
        let published = self.store.stats.progress(name).await.ok().flatten();
        published.filter(|p| p.generation == building.generation).map(|p| p.to_api())
    }

    /// What the filter store says of generation `meta`.
    async fn generation(&self, name: &str, meta: Generation) -> Result<GenerationStats, AppError> {
        let store = &self.store.stats;
        let ones = store.count_ones(name, meta).await.map_err(AppError::FilterRead)?;
        let deletes = store.deletes(name, meta).await.map_err(AppError::FilterRead)?;
        let memory = store.memory_bytes(name, meta).await.map_err(AppError::FilterRead)?;
        let journal = match meta.journal {
            true => Some(store.journal_size(name, meta).await.map_err(AppError::FilterRead)?),
            false => None,
        };
        Ok(GenerationStats { meta, ones, deletes, memory, journal })
    }
}

/// No bits to describe: a rebuild under way (after a loss), or about to start (a filter created
/// over keys the database holds): what there is to see is its progress. Otherwise the bits are
/// unavailable.
fn unbuilt(known: FilterStats, state: &FilterState) -> Result<FilterStats, AppError> {
    match state.building {
        Some(_) => Ok(known),
        None if state.active_is_stale() => Err(AppError::FilterRead(FilterUnavailable::Incarnation)),
        None if state.named().next().is_none() && state.lineage != 0 => Ok(known),
        None => Err(AppError::FilterRead(FilterUnavailable::MetaMissing)),
    }
}

/// The stats of a readable generation: `known` (the definition and any rebuild), the
/// generation's bits as the store counts them, and this origin's lookup counters.
fn describe(
    known: FilterStats,
    state: &FilterState,
    generation: &GenerationStats,
    c: &FilterCounters,
    capacity: u64,
) -> FilterStats {
    let GenerationStats { meta, ones, deletes, memory, journal } = *generation;
    let params = meta.params;
    let (maybes, fps) = (c.filter_maybes.get(), c.false_positives.get());
    let estimated = params.estimated_len(ones);
    let estimated = estimated.is_finite().then_some(estimated);
    let absent_lookups = c.filter_negatives.get() + fps;
    let leased = meta.lease.filter(LeaseTerms::usable);
    FilterStats {
        generation: Some(meta.generation),
        previous_generation: state.previous.map(|m| m.generation),
        k: Some(u32::from(params.k)),
        segment_count: Some(params.segment_count),
        segment_bytes: Some(params.segment_bytes()),
        memory_bytes: memory,
        bits_set: Some(ones),
        fill_ratio: Some(ones as f64 / params.total_bits() as f64),
        estimated_keys: estimated.map(|e| e.round() as u64),
        expected_fp_rate_at_capacity: Some(params.expected_fp_rate(capacity)),
        expected_fp_rate_now: estimated.map(|e| params.expected_fp_rate(e as u64)),
        lookups_answered_by_filter: Some(c.filter_negatives.get()),
        filter_maybes: Some(maybes),
        observed_false_positives: Some(fps),
        false_positive_share_of_maybes: (maybes > 0).then(|| fps as f64 / maybes as f64),
        deletes_since_build: Some(deletes),
        journal_entries: journal.map(|j| j.entries),
        journal_bytes: journal.and_then(|j| j.bytes),
        observed_fp_rate: (absent_lookups > 0).then(|| fps as f64 / absent_lookups as f64),
        read_consistency: Some(leased.map_or("barrier", |_| "lease").to_owned()),
        read_lease_ms: leased.map(|t| t.lease().as_secs_f64() * 1e3),
        lookups_answered_under_lease: Some(c.lease_answers.get()),
        ..known
    }
}
