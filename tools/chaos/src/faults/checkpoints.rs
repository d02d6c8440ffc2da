//! The faults aimed at recovery from a checkpoint: Redis emptied right after a checkpoint
//! round, while one is saving segments, and while a recovery is loading a checkpoint and
//! replaying the log; and the active generation's journal deleted. Each waits for the origins
//! to repair the filter (a new generation active), as the other losses do.

use super::Faults;
use crate::history::FaultKind;
use crate::origin_metrics::{metric, read};
use anyhow::Context as _;
use std::time::{Duration, Instant};

/// How often the origins' counters, or the filter's state in Redis, are read while waiting for
/// the moment to strike.
const POLL: Duration = Duration::from_millis(10);

impl Faults {
    /// The sum over the running origins of a counter of theirs.
    async fn origins_counter(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        let mut sum = 0.0;
        for origin in self.cluster.origins.iter().filter(|o| o.pid().is_some()) {
            if let Some(text) = read(&self.http, &origin.base).await {
                sum += metric(&text, name, labels).unwrap_or(0.0);
            }
        }
        sum
    }

    /// Waits until `counter` of the origins moves past what it is now (or `limit` passes);
    /// whether it moved.
    async fn until_counter_moves(&self, name: &str, labels: &[(&str, &str)], limit: Duration) -> bool {
        let before = self.origins_counter(name, labels).await;
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if self.origins_counter(name, labels).await > before {
                return true;
            }
            tokio::time::sleep(POLL).await;
        }
        false
    }

    /// `FLUSHALL` right after a checkpoint round recorded a checkpoint.
    pub(super) async fn flush_after_checkpoint(&self) -> anyhow::Result<()> {
        let counter = ("bloomgate_checkpoint_rounds_total", &[("result", "recorded")][..]);
        self.flush_when_moved(FaultKind::FlushAfterCheckpoint, counter, "a checkpoint round recorded one").await
    }

    /// `FLUSHALL` as soon as a checkpoint round saved a segment, while it saves the others.
    pub(super) async fn flush_during_checkpoint(&self) -> anyhow::Result<()> {
        let counter = ("bloomgate_checkpoint_segments_saved_total", &[][..]);
        self.flush_when_moved(FaultKind::FlushDuringCheckpoint, counter, "a checkpoint round saved a segment").await
    }

    /// `FLUSHALL` as soon as the origins' `counter` (name, labels) moves (or the recovery wait
    /// passes: flushed anyway, and said so), recorded as `kind`; over once a generation other
    /// than the one active before is.
    async fn flush_when_moved(
        &self,
        kind: FaultKind,
        counter: (&str, &[(&str, &str)]),
        moved: &str,
    ) -> anyhow::Result<()> {
        let limit = self.settings.recovery_wait;
        let seen = self.until_counter_moves(counter.0, counter.1, limit).await;
        let before = self.active_in_redis().await;
        let start = self.rec.now();
        self.redis_command(&redis::cmd("FLUSHALL")).await?;
        let recovered = self.until_active_other_than(before, limit).await;
        let note = match seen {
            true => format!("as soon as {moved}"),
            false => format!("{counter:?} did not move within {limit:?}: flushed anyway"),
        };
        self.record(kind, start, None, Some(recovered), note);
        Ok(())
    }

    /// `FLUSHALL`, then again as soon as the recovery names its generation (while it loads the
    /// checkpoint and replays the log); over once a generation other than that one is active.
    pub(super) async fn flush_during_replay(&self) -> anyhow::Result<()> {
        let limit = self.settings.recovery_wait;
        let before = self.active_in_redis().await;
        let start = self.rec.now();
        self.redis_command(&redis::cmd("FLUSHALL")).await?;
        let deadline = Instant::now() + limit;
        let mut building = None;
        while building.is_none() && Instant::now() < deadline {
            building = self.filter_state().await.and_then(|state| state["building"]["generation"].as_u64());
            tokio::time::sleep(POLL).await;
        }
        self.redis_command(&redis::cmd("FLUSHALL")).await?;
        // The generation flushed mid-fill may have been switched to before the second flush: the
        // repair is a generation after it.
        let recovered = self.until_active_other_than(building.or(before), limit).await;
        let note = match building {
            Some(g) => format!("flushed again while the recovery's generation {g} was being filled"),
            None => "the recovery's generation was not seen being filled: flushed again after it".to_owned(),
        };
        self.record(FaultKind::FlushDuringReplay, start, None, Some(recovered), note);
        Ok(())
    }

    /// Waits until Redis names an active generation other than `from` with no build under way
    /// (the origins' stats may lag behind it by their metadata cache); whether it did within
    /// `limit`.
    async fn until_active_other_than(&self, from: Option<u64>, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if let Some(state) = self.filter_state().await {
                let active = state["active"]["generation"].as_u64();
                if active.is_some() && active != from && state["building"].is_null() {
                    return true;
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        false
    }

    /// The active generation as Redis names it now.
    async fn active_in_redis(&self) -> Option<u64> {
        self.filter_state().await.and_then(|state| state["active"]["generation"].as_u64())
    }

    /// The filter's state as Redis holds it now (the origins' stats may lag behind it).
    async fn filter_state(&self) -> Option<serde_json::Value> {
        let meta = format!("bg:{{{}}}:meta", self.filter);
        match self.redis_command(redis::cmd("GET").arg(&meta)).await {
            Ok(redis::Value::BulkString(json)) => serde_json::from_slice(&json).ok(),
            _ => None,
        }
    }

    /// `DEL` of the active generation's insert journal (the active one as Redis names it, not
    /// as an origin's stats last showed it); over once another generation is active.
    pub(super) async fn delete_journal(&self) -> anyhow::Result<()> {
        let wait = self.settings.recovery_wait;
        self.settled_stats(None, wait).await.with_context(|| format!("no active generation within {wait:?}"))?;
        let state = self.filter_state().await.context("no filter state in Redis")?;
        let generation = state["active"]["generation"].as_u64().context("no active generation in Redis")?;
        let key = format!("bg:{{{}}}:jnl:{generation}", self.filter);
        let start = self.rec.now();
        let deleted = self.redis_command(redis::cmd("DEL").arg(&key)).await?;
        anyhow::ensure!(deleted == redis::Value::Int(1), "DEL {key} deleted nothing ({deleted:?})");
        let recovered = self.until_active_other_than(Some(generation), wait).await;
        self.record(FaultKind::DelJournal, start, None, Some(recovered), format!("DEL {key}"));
        Ok(())
    }
}
