//! A recovery's fill from a checkpoint instead of a scan (docs/design.md, "Recovery without a
//! full scan"): the new generation is named with the checkpoint's params; the checkpoint's
//! segments are ORed into it one at a time (bounded memory); then every key logged in
//! `recent_writes` from the plan's start to now (plus two clock skews) is added to it, as a
//! write adds (bits and journal). Only then is it switched to, by the rebuild's usual switch.
//!
//! Why every acknowledged key is in it: a write whose second state read saw the new generation
//! named added to it itself; any other stored its row and its log row before the generation was
//! named, so before the log is read here. Acknowledged before `R`, its bits are in the
//! checkpoint; after, its log row is stamped after the plan's start (`ReplayMargins`).

use super::{sized, RebuildError, RebuildOptions};
use crate::clock::now_ms;
use crate::store::checkpoint::{replay_plan, NoReplay, ReplayMargins, ReplayPlan};
use crate::store::recent_writes::buckets_between;
use crate::store::{Database, DatabaseError, FilterDef, FilterStore, Generation};
use bloomgate_filter::{hash_key, KeyHash};
use std::sync::atomic::{AtomicBool, Ordering};

/// Keys added to the new generation per call.
const ADD_CHUNK: usize = 1000;

/// The checkpoint a recovery of `def` may start from, or why it scans instead: the newest
/// checkpoint, whole (every segment saved), of the definition's sizing, under a cluster version
/// whose origins all log, recent enough that the log still holds every write since.
pub(super) async fn plan(
    keys: &dyn Database,
    def: &FilterDef,
    options: &RebuildOptions,
    margins: ReplayMargins,
) -> Result<Result<ReplayPlan, NoReplay>, RebuildError> {
    let Some(checkpoint) = keys.checkpoint(&def.name).await? else { return Ok(Err(NoReplay::NoCheckpoint)) };
    let expected = sized(def, options, checkpoint.params.seed)?;
    let cluster = keys.cluster_version().await?;
    let plan = match replay_plan(Some(checkpoint), expected, cluster, margins, now_ms()) {
        Ok(plan) => plan,
        Err(why) => return Ok(Err(why)),
    };
    let saved = keys.saved_segments(&def.name, checkpoint.generation).await?;
    let whole = (0..checkpoint.params.segment_count).all(|index| saved.iter().any(|s| s.index == index));
    Ok(if whole { Ok(plan) } else { Err(NoReplay::NoCheckpoint) })
}

/// What a replay added.
pub(super) struct Replayed {
    /// Keys added from the log.
    pub keys: u64,
    /// Seconds it took.
    pub secs: f64,
}

/// Fills `new` (named with the checkpoint's params) from `plan`: its segments, then the log.
pub(super) async fn fill(
    filters: &dyn FilterStore,
    keys: &dyn Database,
    filter: &str,
    new: Generation,
    plan: ReplayPlan,
    margins: ReplayMargins,
    lost: &AtomicBool,
) -> Result<Replayed, RebuildError> {
    let started = std::time::Instant::now();
    let checkpointed = plan.checkpoint.generation;
    for index in 0..new.params.segment_count {
        if lost.load(Ordering::SeqCst) {
            return Err(RebuildError::LeaseLost);
        }
        let bits = keys.saved_segment_bits(filter, checkpointed, index).await?.ok_or_else(|| {
            DatabaseError::other(format!(
                "segment {index} of checkpoint {checkpointed} went missing during the recovery"
            ))
        })?;
        filters.merge_segment(filter, new, index, bits).await?;
    }
    let mut replayed = 0u64;
    // Negative control (test builds only): the log is skipped, and the writes acknowledged
    // after the checkpoint are lost.
    if !crate::planted::active(crate::planted::Bug::SkipReplay) {
        // Read after `new` was named: every write not adding to it itself is logged by now.
        let until = now_ms() + (margins.clock_skew * 2).as_millis() as u64;
        for bucket in buckets_between(plan.from_ms, until) {
            let logged = keys.recent_writes_in(filter, bucket).await?;
            for chunk in logged.chunks(ADD_CHUNK) {
                if lost.load(Ordering::SeqCst) {
                    return Err(RebuildError::LeaseLost);
                }
                let hashes: Vec<KeyHash> = chunk.iter().map(|key| hash_key(key, new.params.seed)).collect();
                filters.add(filter, new, hashes).await?;
                replayed += chunk.len() as u64;
            }
        }
    }
    Ok(Replayed { keys: replayed, secs: started.elapsed().as_secs_f64() })
}
