//! Phase 4: the switch to the new generation, in one compare-and-set, unless the state moved
//! under the rebuild; then, after the grace period, the replaced generation retired (bits gone
//! first, name second). And a failed rebuild's generation abandoned the same way.

use super::RebuildError;
use crate::store::{FilterState, Generation, LifecycleStore, StoreResult};
use std::sync::atomic::{AtomicBool, Ordering};

/// Times a small state change is retried when another origin changed the state first.
const STATE_RETRIES: usize = 5;

/// Makes `new` (named `building` at `named_revision`) the active generation, unless the state
/// moved under the rebuild (it only moves under the lease) or the lease is `lost`; the
/// generation it replaced, if any.
pub(super) async fn switch(
    filters: &dyn LifecycleStore,
    filter: &str,
    new: Generation,
    named_revision: u64,
    lost: &AtomicBool,
) -> Result<Option<Generation>, RebuildError> {
    let current = filters.state_for_write(filter).await?;
    if current.building != Some(new) || current.revision != named_revision || lost.load(Ordering::SeqCst) {
        return Err(RebuildError::LeaseLost);
    }
    let replaced = current.readable();
    let switched = FilterState {
        active: Some(new),
        building: None,
        previous: replaced,
        previous_since_ms: replaced.map(|_| crate::clock::now_ms()),
        ..current
    };
    if !filters.replace_state(filter, Some(current.revision), switched).await? {
        return Err(RebuildError::LeaseLost);
    }
    Ok(replaced)
}

/// Retires `old`, then unnames it if the state still names it as `previous`.
pub(super) async fn retire_previous(
    filters: &dyn LifecycleStore,
    filter: &str,
    old: Generation,
) -> Result<(), RebuildError> {
    filters.retire_and_wait(filter, &[old]).await?;
    let unnamed = |latest| FilterState { previous: None, previous_since_ms: None, ..latest };
    match unname(filters, filter, |state| state.previous == Some(old), unnamed).await? {
        true => Ok(()),
        false => Err(RebuildError::LeaseLost),
    }
}

/// Gives up a generation this rebuild named: retired, then unnamed. Best effort: if it fails,
/// the generation stays named (it takes adds and is never read) until the next rebuild clears
/// it as a leftover.
pub(super) async fn abandon(filters: &dyn LifecycleStore, filter: &str, new: Generation) {
    let result: StoreResult<()> = async {
        filters.retire_and_wait(filter, &[new]).await?;
        let unnamed = |latest| FilterState { building: None, ..latest };
        unname(filters, filter, |state| state.building == Some(new), unnamed).await?;
        Ok(())
    }
    .await;
    match result {
        Ok(()) => tracing::info!(filter, generation = new.generation, "rebuild: abandoned its generation"),
        Err(e) => {
            tracing::warn!(filter, generation = new.generation, cause = %e, "rebuild: could not abandon its generation; the next rebuild will")
        }
    }
}

/// Replaces the state with `unnamed(state)` while it still `names` a generation, retrying when
/// another origin changed it first; false if it still did after [`STATE_RETRIES`] tries.
async fn unname(
    filters: &dyn LifecycleStore,
    filter: &str,
    names: impl Fn(&FilterState) -> bool,
    unnamed: impl Fn(FilterState) -> FilterState,
) -> StoreResult<bool> {
    for _ in 0..STATE_RETRIES {
        let latest = filters.state_for_write(filter).await?;
        if !names(&latest) {
            return Ok(true);
        }
        if filters.replace_state(filter, Some(latest.revision), unnamed(latest)).await? {
            return Ok(true);
        }
    }
    Ok(false)
}
