//! Helping a rebuild another process started: one run of its board (`runs`) claimed, scanned
//! and merged here. Called by every origin's recovery check for a filter whose rebuild runs
//! elsewhere, so a filter built in many runs (larger than one process's rebuild memory) is
//! built by several origins at once, each holding one run's bits at most.

use super::fill::Published;
use super::runs::{new_owner, Builder};
use super::{RebuildError, RebuildOptions};
use crate::store::{Database, FilterStore, FilterUnavailable};
use std::sync::atomic::AtomicBool;

/// A run this origin built for another's rebuild.
#[derive(Clone, Debug)]
pub struct HelpedRun {
    /// The generation it was built for.
    pub generation: u64,
    /// The run's number on the board.
    pub index: u32,
    /// Keys its scan read.
    pub keys: u64,
}

/// Builds one unclaimed run of `filter`'s rebuild, if it has a board with one this origin's
/// rebuild memory can hold; None when there is nothing to help with.
pub async fn help(
    store: &dyn FilterStore,
    keys: &dyn Database,
    filter: &str,
    options: &RebuildOptions,
) -> Result<Option<HelpedRun>, RebuildError> {
    let state = store.state_for_write(filter).await?;
    let Some(new) = state.building else { return Ok(None) };
    let board = match store.run_board(filter, new.generation).await {
        Ok(Some(board)) => board,
        Ok(None) => return Ok(None),
        // A board this build cannot read (a newer format): the rebuild that posted it builds on.
        Err(FilterUnavailable::Error(why)) => {
            tracing::debug!(filter, why, "not helping a rebuild");
            return Ok(None);
        }
        Err(e) => return Err(e.into()),
    };
    // A run is one segment at least, whatever the budget (`bloomgate_filter::segment_runs`).
    if board.plan.run_bytes > options.memory_bytes.max(new.params.segment_bytes()) {
        tracing::debug!(
            filter,
            run_bytes = board.plan.run_bytes,
            "not helping a rebuild: its runs exceed this origin's rebuild memory"
        );
        return Ok(None);
    }
    let builder = Builder { store, keys, filter, new, options, owner: new_owner() };
    for index in board.undone() {
        let run = board.plan.runs[index as usize].clone();
        if run.start >= run.end || run.end > new.params.segment_count {
            tracing::warn!(filter, index, segments = ?run, "not helping a rebuild: its board names segments the generation lacks");
            return Ok(None);
        }
        if !store.claim_run(filter, new.generation, index, &builder.owner, options.lease_ttl).await? {
            continue;
        }
        tracing::info!(
            filter,
            generation = new.generation,
            run = index + 1,
            of = board.plan.runs.len(),
            "helping a rebuild: scanning for a run of segments"
        );
        let mut progress = Published::unpublished(store, filter, new);
        let built = builder.build_claimed(index, run, &AtomicBool::new(false), &mut progress).await?;
        store.finish_run(filter, new.generation, index, &builder.owner, built.keys).await?;
        return Ok(Some(HelpedRun { generation: new.generation, index, keys: built.keys }));
    }
    Ok(None)
}
