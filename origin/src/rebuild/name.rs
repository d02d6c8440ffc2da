//! Phase 1: the new generation named. What dead rebuilds and lost incarnations left is retired
//! and unnamed first (and, when the state itself was lost, every generation it named made
//! unreadable); then the new generation is created and named `building`, in one
//! compare-and-set, before the scan starts.

use super::RebuildError;
use crate::lease::LeaseSettings;
use crate::store::{FilterState, FilterUnavailable, Generation, LifecycleStore};
use bloomgate_filter::Params;

/// Names a new generation of `params` `building`; it and the revision the state has now.
pub(super) async fn name_generation(
    filters: &dyn LifecycleStore,
    filter: &str,
    params: Params,
    journal: bool,
    lease: LeaseSettings,
) -> Result<(Generation, u64), RebuildError> {
    let (state, revision) = read_state(filters, filter).await?;
    if state.dropped.is_some() {
        // Dropped: its generations are gone for good. (A rebuild that read the state before
        // the tombstone fails its compare-and-set below instead.)
        return Err(RebuildError::UnknownFilter(filter.into()));
    }
    if revision.is_none() {
        // The state is gone (its key deleted or evicted) but the generations it named may
        // still have their bits, and origins may hold one of them in their metadata cache.
        // Writes stop reaching them the moment a new generation is named, so they must be
        // unreadable before that.
        let deleted = filters.delete_orphans(filter, Vec::new()).await?;
        if deleted > 0 {
            tracing::info!(filter, keys = deleted, "rebuild: the filter state was lost; deleted the bits it named");
        }
        // On which lease terms they were read is lost with the state (see `lease`).
        tokio::time::sleep(lease.unknown_terms_wait()).await;
    }
    let (state, revision) = clear_leftovers(filters, filter, state, revision).await?;
    let generation = next_generation(&state, crate::clock::now_ms());
    let lease = lease.terms_for(state.read_consistency);
    let new = Generation { generation, params, incarnation: state.read_from, journal, lease };
    filters.create_generation(filter, new).await?;
    // A state made from nothing (the store lost it) starts a lineage of its own: a write that
    // read the lost one is not acknowledged into it (see `Gate::insert_many`).
    let lineage = if revision.is_none() { new.generation } else { state.lineage };
    let named = FilterState { building: Some(new), lineage, ..state };
    if !filters.replace_state(filter, revision, named).await? {
        filters.retire_generation(filter, new).await?;
        return Err(RebuildError::LeaseLost);
    }
    Ok((new, revision.map_or(1, |r| r + 1)))
}

/// The new generation's number: after every one the state names, not before its lineage (so
/// after every number a dropped filter of the name used), and from the clock so it is never
/// reused even when the filter store lost every record of earlier ones.
fn next_generation(state: &FilterState, now_ms: u64) -> u64 {
    let newest = state.named().map(|m| m.generation).max();
    now_ms.max(newest.map_or(0, |g| g + 1)).max(state.lineage)
}

/// What a rebuild must clear away before it names its own generation: a `building` left by a
/// rebuild that died (the caller holds the lease, so no live rebuild owns it), a `previous`
/// whose retirement never came, and every generation of another store incarnation. Pure.
pub fn leftovers(state: &FilterState) -> Vec<Generation> {
    let mut out: Vec<Generation> = state.stale().collect();
    out.extend(state.building.filter(|m| state.is_current(m)));
    out.extend(state.previous.filter(|m| state.is_current(m)));
    out
}

/// The filter's state read for a rebuild, with the revision a change must expect (None: there
/// is no state, the filter store lost it).
async fn read_state(filters: &dyn LifecycleStore, filter: &str) -> Result<(FilterState, Option<u64>), RebuildError> {
    match filters.state_for_write(filter).await {
        Ok(state) => Ok((state, Some(state.revision))),
        Err(FilterUnavailable::MetaMissing) => {
            let incarnation = filters.incarnation().await?;
            Ok((FilterState { read_from: incarnation, ..FilterState::default() }, None))
        }
        Err(e) => Err(e.into()),
    }
}

/// Retires the leftovers, then unnames them in one compare-and-set. Returns the state after.
async fn clear_leftovers(
    filters: &dyn LifecycleStore,
    filter: &str,
    state: FilterState,
    revision: Option<u64>,
) -> Result<(FilterState, Option<u64>), RebuildError> {
    let gone = leftovers(&state);
    if gone.is_empty() {
        return Ok((state, revision));
    }
    for meta in &gone {
        tracing::info!(filter, generation = meta.generation, "rebuild: retiring a leftover generation");
    }
    filters.retire_and_wait(filter, &gone).await?;
    let cleared =
        FilterState { active: state.readable(), building: None, previous: None, previous_since_ms: None, ..state };
    if !filters.replace_state(filter, revision, cleared).await? {
        return Err(RebuildError::LeaseLost);
    }
    Ok((cleared, Some(revision.map_or(1, |r| r + 1))))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(generation: u64, incarnation: u64) -> Option<Generation> {
        Some(Generation {
            generation,
            params: Params::new(1, 6, 0, 1).unwrap(),
            incarnation,
            journal: true,
            lease: None,
        })
    }

    #[test]
    fn generations_only_grow() {
        assert_eq!(next_generation(&FilterState::default(), 1000), 1000);
        let state = FilterState { active: meta(5000, 1), previous: meta(4000, 1), ..FilterState::default() };
        assert_eq!(next_generation(&state, 1000), 5001, "a clock behind the newest generation");
        assert_eq!(next_generation(&state, 9000), 9000);
        let stale = FilterState { active: meta(7000, 2), read_from: 1, ..FilterState::default() };
        assert_eq!(next_generation(&stale, 1000), 7001, "a lost incarnation's numbers are never reused either");
        let recreated = FilterState { lineage: 8000, ..FilterState::default() };
        assert_eq!(next_generation(&recreated, 1000), 8000, "nor a dropped filter's, whose floor is the lineage");
    }

    #[test]
    fn a_rebuild_clears_what_dead_rebuilds_and_lost_incarnations_left() {
        let state = FilterState {
            active: meta(3, 1),
            building: meta(5, 1),
            previous: meta(2, 1),
            read_from: 1,
            ..FilterState::default()
        };
        let gone: Vec<u64> = leftovers(&state).iter().map(|m| m.generation).collect();
        assert_eq!(gone, [5, 2], "the active generation stays");
        let rolled_back =
            FilterState { active: meta(3, 1), building: meta(5, 2), read_from: 2, ..FilterState::default() };
        let gone: Vec<u64> = leftovers(&rolled_back).iter().map(|m| m.generation).collect();
        assert_eq!(gone, [3, 5], "bits of another incarnation, then the abandoned build");
        assert!(leftovers(&FilterState { active: meta(3, 1), read_from: 1, ..FilterState::default() }).is_empty());
    }
}
