//! What names, fills, switches and retires generations in Redis: creating a generation's
//! segments and journal, the state's compare-and-set, merging a rebuild's bits, retiring,
//! clearing what a dropped filter or a dead rebuild left (found by SCAN on every master), the
//! rebuild lease and its published progress.

use super::conn::RedisConn;
use super::keys::{
    deletes_key, generation_of_key, journal_key, lease_key, meta_key, progress_key, run_claim_key, runs_key,
    segment_keys, upload_key,
};
use super::{Backend, RedisFilterStore};
use crate::build_progress::BuildProgress;
use crate::store::run_board::{done_field, RunBoard, RunPlan, PLAN_FIELD};
use crate::store::{FilterState, FilterUnavailable, Generation, LifecycleStore, StoreResult, STATE_FORMAT};
use async_trait::async_trait;
use redis::AsyncCommands;
use std::time::Duration;
use tracing::instrument;

/// How long a retired segment's marker lives: far longer than any write that read a state
/// naming the generation can take.
const RETIRED_MARKER_MS: u64 = 600_000;

/// A rebuild's published progress outlives its last update by this much, then vanishes.
const PROGRESS_TTL_MS: u64 = 30_000;

/// A rebuild's board of runs vanishes this long after it was posted if nobody takes it down (a
/// rebuild that died): longer than any rebuild, and its runs are useless once its lease is gone.
const RUNS_TTL_MS: u64 = 24 * 3_600_000;

#[async_trait]
impl LifecycleStore for RedisFilterStore {
    #[instrument(skip(self, meta))]
    async fn create_generation(&self, filter: &str, meta: Generation) -> StoreResult<()> {
        let filter = filter.to_owned();
        let size = meta.params.segment_bytes();
        for index in 0..meta.params.segment_count {
            let (bits, ver) = segment_keys(&filter, meta.generation, index);
            let script = &self.scripts.create_segment;
            let len: u64 = self
                .run(self.write_timeout, Some(meta.incarnation), {
                    let mut invocation = script.key(&bits);
                    invocation.key(&ver).arg(size);
                    invocation
                })
                .await?;
            if len != size {
                return Err(FilterUnavailable::Error(format!(
                    "segment {index} of generation {} is {len} bytes, expected {size}: delete the filter's keys in Redis and rebuild",
                    meta.generation
                )));
            }
        }
        if !meta.journal {
            return Ok(());
        }
        // The journal starts with one entry, so it exists (appends never create it).
        let journal = journal_key(&filter, meta.generation);
        let _: i64 =
            self.run(self.write_timeout, Some(meta.incarnation), self.scripts.init_journal.key(journal)).await?;
        Ok(())
    }

    /// On a cluster, read now: a generation about to be created must name today's masters.
    async fn incarnation(&self) -> StoreResult<u64> {
        let timed_out = |_| FilterUnavailable::Timeout;
        match &self.backend {
            Backend::Single(link) => {
                Ok(tokio::time::timeout(self.write_timeout, link.get()).await.map_err(timed_out)??.incarnation)
            }
            Backend::Cluster(cluster) => {
                Ok(tokio::time::timeout(self.write_timeout, cluster.refresh()).await.map_err(timed_out)??.incarnation)
            }
        }
    }

    async fn replace_state(&self, filter: &str, expected: Option<u64>, state: FilterState) -> StoreResult<bool> {
        let key = meta_key(filter);
        let state = FilterState { revision: expected.map_or(1, |r| r + 1), format: STATE_FORMAT, ..state };
        let json = serde_json::to_string(&state).map_err(|e| FilterUnavailable::Error(e.to_string()))?;
        let expected: i64 = expected.map_or(-1, |r| r as i64);
        let script = &self.scripts.replace_state;
        let replaced: i64 = self
            .run(self.write_timeout, None, {
                let mut invocation = script.key(&key);
                invocation.arg(expected).arg(json).arg(STATE_FORMAT);
                invocation
            })
            .await?;
        match replaced {
            // The stored state is of a newer format: replacing it would drop what this build
            // does not know (see `replace_state.lua`).
            found if found < 0 => Err(FilterUnavailable::UnknownFormat {
                record: "the filter state",
                found: u32::try_from(-found).unwrap_or(u32::MAX),
                known: STATE_FORMAT,
            }),
            replaced => Ok(replaced == 1),
        }
    }

    async fn merge_segment(&self, filter: &str, meta: Generation, index: u32, payload: Vec<u8>) -> StoreResult<()> {
        let (bits, ver) = segment_keys(filter, meta.generation, index);
        let upload = upload_key(filter, meta.generation, index);
        let script = &self.scripts.merge_segment;
        let version: i64 = self
            .run(self.write_timeout, Some(meta.incarnation), {
                let mut invocation = script.key(&bits);
                invocation.key(&ver).key(&upload).arg(payload);
                invocation
            })
            .await?;
        if version < 0 {
            return Err(FilterUnavailable::SegmentMissing(index));
        }
        Ok(())
    }

    async fn set_progress(&self, filter: &str, progress: BuildProgress) -> StoreResult<()> {
        let key = progress_key(filter);
        let json = serde_json::to_string(&progress).map_err(|e| FilterUnavailable::Error(e.to_string()))?;
        self.call(
            self.write_timeout,
            None,
            |mut c| async move { c.pset_ex::<_, _, ()>(key, json, PROGRESS_TTL_MS).await },
        )
        .await
    }

    async fn retire_generation(&self, filter: &str, meta: Generation) -> StoreResult<()> {
        let filter = filter.to_owned();
        for index in 0..meta.params.segment_count {
            let (bits, ver) = segment_keys(&filter, meta.generation, index);
            let script = &self.scripts.retire_segment;
            // Any incarnation: retiring a stale generation's keys is what they are for.
            let _: i64 = self
                .run(self.write_timeout, None, {
                    let mut invocation = script.key(&bits);
                    invocation.key(&ver).arg(RETIRED_MARKER_MS);
                    invocation
                })
                .await?;
        }
        let journal = journal_key(&filter, meta.generation);
        let script = &self.scripts.retire_journal;
        let _: i64 = self
            .run(self.write_timeout, None, {
                let mut invocation = script.key(&journal);
                invocation.arg(RETIRED_MARKER_MS);
                invocation
            })
            .await?;
        let deletes = deletes_key(&filter, meta.generation);
        self.call(self.write_timeout, None, |mut c| async move { c.del::<_, ()>(&deletes).await }).await
    }

    async fn delete_orphans(&self, filter: &str, keep: Vec<u64>) -> StoreResult<u64> {
        let filter = filter.to_owned();
        let mut keys = self.scan_keys(&format!("bg:{{{filter}:*")).await?;
        keys.extend(self.scan_keys(&format!("bg:{{{filter}}}:deletes:*")).await?);
        keys.extend(self.scan_keys(&format!("bg:{{{filter}}}:jnl:*")).await?);
        keys.extend(self.scan_keys(&format!("bg:{{{filter}}}:run*")).await?);
        keys.extend(self.scan_keys(&format!("bg:{{{filter}}}:jstep:*")).await?);
        let mut deleted = 0u64;
        for key in keys {
            let Some(generation) = generation_of_key(&filter, &key) else { continue };
            if keep.contains(&generation) {
                continue;
            }
            let script = &self.scripts.delete_unless_retired;
            let n: u64 = if key.ends_with(":ver") || key.contains(":jnl:") {
                self.run(self.write_timeout, None, script.key(&key)).await?
            } else {
                self.call(self.write_timeout, None, |mut c| async move { c.del(&key).await }).await?
            };
            deleted += n;
        }
        Ok(deleted)
    }

    async fn clear_dropped(&self, filter: &str) -> StoreResult<u64> {
        let generations = self.delete_orphans(filter, Vec::new()).await?;
        let (progress, lease) = (progress_key(filter), lease_key(filter));
        let bookkeeping: u64 =
            self.call(self.write_timeout, None, |mut c| async move { c.del(&[progress, lease]).await }).await?;
        Ok(generations + bookkeeping)
    }

    async fn lease(&self, filter: &str, owner: &str, ttl: Duration) -> StoreResult<bool> {
        let (key, owner) = (lease_key(filter), owner.to_owned());
        let script = &self.scripts.lease;
        let held: i64 = self
            .run(self.write_timeout, None, {
                let mut invocation = script.key(&key);
                invocation.arg(&owner).arg(ttl.as_millis() as u64);
                invocation
            })
            .await?;
        Ok(held == 1)
    }

    async fn release_lease(&self, filter: &str, owner: &str) -> StoreResult<()> {
        let (key, owner) = (lease_key(filter), owner.to_owned());
        let script = &self.scripts.release_lease;
        let _: i64 = self
            .run(self.write_timeout, None, {
                let mut invocation = script.key(&key);
                invocation.arg(&owner);
                invocation
            })
            .await?;
        Ok(())
    }

    async fn post_runs(&self, filter: &str, generation: u64, plan: &RunPlan) -> StoreResult<()> {
        let (key, plan) = (runs_key(filter, generation), plan.encode());
        self.call(self.write_timeout, None, |mut c| async move {
            redis::pipe()
                .atomic()
                .hset(&key, PLAN_FIELD, plan)
                .ignore()
                .pexpire(&key, RUNS_TTL_MS as i64)
                .ignore()
                .query_async::<()>(&mut c)
                .await
        })
        .await
    }

    async fn run_board(&self, filter: &str, generation: u64) -> StoreResult<Option<RunBoard>> {
        let key = runs_key(filter, generation);
        let fields: Vec<(String, String)> =
            self.call(self.write_timeout, None, |mut c| async move { c.hgetall(key).await }).await?;
        RunBoard::from_fields(&fields).map_err(FilterUnavailable::Error)
    }

    async fn claim_run(
        &self,
        filter: &str,
        generation: u64,
        index: u32,
        owner: &str,
        ttl: Duration,
    ) -> StoreResult<bool> {
        let key = run_claim_key(filter, generation, index);
        let script = &self.scripts.lease;
        let held: i64 = self
            .run(self.write_timeout, None, {
                let mut invocation = script.key(&key);
                invocation.arg(owner).arg(ttl.as_millis() as u64);
                invocation
            })
            .await?;
        Ok(held == 1)
    }

    async fn finish_run(&self, filter: &str, generation: u64, index: u32, owner: &str, keys: u64) -> StoreResult<()> {
        let (board, claim) = (runs_key(filter, generation), run_claim_key(filter, generation, index));
        let script = &self.scripts.finish_run;
        let _: i64 = self
            .run(self.write_timeout, None, {
                let mut invocation = script.key(&board);
                invocation.key(&claim).arg(done_field(index)).arg(keys).arg(owner);
                invocation
            })
            .await?;
        Ok(())
    }

    async fn withdraw_runs(&self, filter: &str, generation: u64) -> StoreResult<()> {
        let key = runs_key(filter, generation);
        self.call(self.write_timeout, None, |mut c| async move { c.del::<_, ()>(key).await }).await
    }
}

impl RedisFilterStore {
    /// Every key matching `pattern` (SCAN: incremental, never blocks Redis), on every master.
    pub(super) async fn scan_keys(&self, pattern: &str) -> StoreResult<Vec<String>> {
        let mut keys = Vec::new();
        match &self.backend {
            Backend::Single(_) => self.scan_node(None, pattern, &mut keys).await?,
            Backend::Cluster(cluster) => {
                for master in &cluster.topology()?.masters {
                    self.scan_node(Some(master), pattern, &mut keys).await?;
                }
            }
        }
        Ok(keys)
    }

    /// SCANs one node: the single Redis, or the cluster master at `master` (`host:port`).
    pub(super) async fn scan_node(
        &self,
        master: Option<&str>,
        pattern: &str,
        keys: &mut Vec<String>,
    ) -> StoreResult<()> {
        let route = match master {
            None => None,
            Some(address) => Some(super::cluster::route_to(address)?),
        };
        let mut cursor: u64 = 0;
        loop {
            let mut scan = redis::cmd("SCAN");
            scan.arg(cursor).arg("MATCH").arg(pattern).arg("COUNT").arg(1000);
            let route = route.clone();
            let (next, batch): (u64, Vec<String>) = self
                .call(self.write_timeout, None, |c| async move {
                    match (c, route) {
                        (RedisConn::Cluster(mut c), Some(route)) => {
                            Ok(redis::from_redis_value(c.route_command(scan, route).await?)?)
                        }
                        (mut c, _) => scan.query_async(&mut c).await,
                    }
                })
                .await?;
            keys.extend(batch);
            if next == 0 {
                return Ok(());
            }
            cursor = next;
        }
    }
}
