//! The sequential steps of the fault schedule, one method each: each injects its fault, waits
//! for the origins to repair the filter where they must (a new generation active), and records
//! the fault with its window.

use super::Faults;
use crate::history::{Fault, FaultKind};
use crate::schedule::Step;
use anyhow::Context as _;
use std::time::Duration;

/// How long a Redis going back in time waits for an origin to hold a local copy first.
pub(super) const COPY_WAIT: Duration = Duration::from_secs(15);

impl Faults {
    /// Runs one sequential step.
    pub async fn step(&self, step: Step) -> anyhow::Result<()> {
        match step {
            Step::Pause(d) => tokio::time::sleep(d).await,
            Step::AutoResize => self.auto_resize().await,
            Step::Rebuild => self.rebuild(FaultKind::Rebuild).await?,
            Step::Resize => self.rebuild(FaultKind::Resize).await?,
            Step::KillBuilder(phase) => self.kill_builder(phase).await?,
            Step::RedisMasterKill => self.kill_redis_master().await?,
            Step::RedisRestartEmpty => self.restart_redis_empty().await?,
            Step::FlushAll => self.flush_all().await?,
            Step::DelSegmentBits | Step::DelSegmentVer | Step::DelMeta => self.delete_filter_key(step).await?,
            Step::StaleDeletes => self.stale_deletes().await?,
            Step::Snapshot => self.snapshot().await?,
            Step::Rollback => self.rollback().await?,
            Step::EdgeBehindJournal => self.edge_behind_journal().await?,
            Step::FlushAfterCheckpoint => self.flush_after_checkpoint().await?,
            Step::FlushDuringCheckpoint => self.flush_during_checkpoint().await?,
            Step::FlushDuringReplay => self.flush_during_replay().await?,
            Step::DelJournal => self.delete_journal().await?,
        }
        Ok(())
    }

    /// Writes past the filter's capacity, so the origins resize it on their own.
    async fn auto_resize(&self) {
        let before = self.generation().await;
        let start = self.rec.now();
        let want = (self.settings.initial_capacity as usize * 3 / 2).max(1000);
        let stored = self.workload.preload(want, Duration::from_secs(60)).await;
        let recovered = self.wait_switch(before, self.settings.recovery_wait.max(Duration::from_secs(30))).await;
        let capacity = self.any_stats().await.and_then(|s| s["capacity"].as_u64());
        let note = format!(
            "{stored} keys written into a filter of capacity {}; capacity now {capacity:?}",
            self.settings.initial_capacity
        );
        self.record(FaultKind::AutoResize, start, None, Some(recovered), note);
    }

    /// A rebuild on a random origin (`Rebuild`), or one to another capacity (`Resize`).
    async fn rebuild(&self, kind: FaultKind) -> anyhow::Result<()> {
        let stats = self.stats_within(self.settings.recovery_wait).await?;
        let before = stats["generation"].as_u64();
        let capacity = stats["capacity"].as_u64().unwrap_or(self.settings.initial_capacity);
        // Growing to several segments (so a deleted segment is one of many), or
        // shrinking a filter that grew large in an earlier round.
        let new = (kind == FaultKind::Resize).then(|| {
            if capacity < 1_000_000 {
                (capacity * 4).max(250_000)
            } else {
                capacity / 4
            }
        });
        let origin = self.live_origin(None).context("no origin running")?;
        let start = self.rec.now();
        self.post_rebuild(origin, new).await?;
        let recovered = self.wait_switch(before, self.settings.recovery_wait).await;
        let note = match new {
            Some(n) => format!("capacity {capacity} -> {n}"),
            None => format!("capacity {capacity}"),
        };
        self.record(kind, start, Some(origin), Some(recovered), note);
        Ok(())
    }

    /// `kill -9` of the private Redis, restarted empty.
    async fn restart_redis_empty(&self) -> anyhow::Result<()> {
        let before = self.generation().await;
        let start = self.rec.now();
        self.cluster.with_redis(|r| r.restart())?;
        let recovered = self.wait_switch(before, self.settings.recovery_wait).await;
        self.record(FaultKind::RedisRestartEmpty, start, None, Some(recovered), "kill -9, restarted empty".into());
        Ok(())
    }

    /// `FLUSHALL`: every key of every filter gone.
    async fn flush_all(&self) -> anyhow::Result<()> {
        let before = self.generation().await;
        let start = self.rec.now();
        self.redis_command(&redis::cmd("FLUSHALL")).await?;
        let recovered = self.wait_switch(before, self.settings.recovery_wait).await;
        self.record(FaultKind::FlushAll, start, None, Some(recovered), String::new());
        Ok(())
    }

    /// Deletes one key of the active generation: a random segment's bits or version, or the
    /// filter's metadata.
    async fn delete_filter_key(&self, step: Step) -> anyhow::Result<()> {
        let wait = self.settings.recovery_wait;
        let stats =
            self.settled_stats(None, wait).await.with_context(|| format!("no active generation within {wait:?}"))?;
        let generation = stats["generation"].as_u64().context("no active generation")?;
        let segments = stats["segment_count"].as_u64().unwrap_or(1).max(1) as usize;
        let index = self.random(segments);
        let f = &self.filter;
        let (kind, key) = match step {
            Step::DelSegmentBits => (FaultKind::DelSegmentBits, format!("bg:{{{f}:{generation}:{index}}}:bits")),
            Step::DelSegmentVer => (FaultKind::DelSegmentVer, format!("bg:{{{f}:{generation}:{index}}}:ver")),
            _ => (FaultKind::DelMeta, format!("bg:{{{f}}}:meta")),
        };
        let start = self.rec.now();
        let deleted = self.redis_command(redis::cmd("DEL").arg(&key)).await?;
        anyhow::ensure!(deleted == redis::Value::Int(1), "DEL {key} deleted nothing ({deleted:?})");
        let recovered = self.wait_switch(Some(generation), wait).await;
        self.record(kind, start, None, Some(recovered), format!("DEL {key} ({segments} segments)"));
        Ok(())
    }

    /// Deletes enough keys at once for the origins to rebuild the filter on their own.
    async fn stale_deletes(&self) -> anyhow::Result<()> {
        let stats = self.stats_within(self.settings.recovery_wait).await?;
        let before = stats["generation"].as_u64();
        let keys = stats["estimated_keys"].as_u64().unwrap_or(0) as f64;
        let share = self.cluster.settings.tuning.auto_stale_delete_share;
        // Half as many again as the threshold: the estimate is noisy.
        let n = (keys * share * 1.5).ceil() as usize + 10;
        let start = self.rec.now();
        let deleted = self.workload.delete_burst(n, Duration::from_secs(60)).await;
        let recovered = self.wait_switch(before, self.settings.recovery_wait).await;
        let note =
            format!("{deleted} keys deleted at once; the filter held about {keys} keys, threshold share {share}");
        self.record(FaultKind::StaleDeletes, start, None, Some(recovered), note);
        Ok(())
    }

    /// `SAVE`, and the snapshot copied aside for a later rollback.
    async fn snapshot(&self) -> anyhow::Result<()> {
        self.redis_command(&redis::cmd("SAVE")).await?;
        let aside = self.cluster.settings.dir.join("snapshot.rdb");
        let from = self.cluster.with_redis(|r| r.snapshot_path())?;
        std::fs::copy(&from, &aside).with_context(|| format!("copy {}", from.display()))?;
        *self.snapshot.lock().unwrap_or_else(|e| e.into_inner()) = Some((aside, self.rec.now()));
        Ok(())
    }

    /// `kill -9` of the private Redis, restarted from the snapshot: Redis went back in time.
    async fn rollback(&self) -> anyhow::Result<()> {
        let (path, taken) =
            self.snapshot.lock().unwrap_or_else(|e| e.into_inner()).clone().context("no snapshot taken")?;
        let copy_held = self.await_copy_held(COPY_WAIT).await;
        let before = self.generation().await;
        let start = self.rec.now();
        self.cluster.with_redis(|r| r.restart_from(&path))?;
        let restored = self.generation().await;
        // Repaired once a generation other than the one active before is readable: the
        // snapshot's own may have lost acknowledged bits (and is that one, when no rebuild
        // switched between the snapshot and now).
        let recovered = self.wait_switch(before, self.settings.recovery_wait).await;
        let note = format!(
            "kill -9, restarted from the snapshot of {:.1}s ({:.1}s of bits lost); generation {before:?} before, {restored:?} readable at once",
            taken as f64 / 1e6,
            (start - taken) as f64 / 1e6
        );
        let recovered = Some(recovered);
        let fault = Fault {
            kind: FaultKind::RedisRollback,
            start,
            end: 0,
            origin: None,
            recovered,
            note,
            copy_held: Some(copy_held),
        };
        self.record_fault(fault);
        Ok(())
    }
}
