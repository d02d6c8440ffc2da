//! What the injectors read of the filter to know when a fault is over: an origin's stats, the
//! active generation, a settled switch to a new one, the rebuild phase the builder published;
//! and the calls they make of it (start a rebuild, a Redis command).

use super::Faults;
use crate::schedule::Phase;
use anyhow::Context as _;
use bloomgate_tests::origin::TOKEN;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

impl Faults {
    /// The filter's stats from one origin, if it answers 200.
    pub(super) async fn stats(&self, origin: u8) -> Option<Value> {
        let url = format!("{}/v1/filters/{}/stats", self.cluster.origins[origin as usize].base, self.filter);
        let r = self.http.get(url).bearer_auth(TOKEN).timeout(Duration::from_secs(5)).send().await.ok()?;
        if !r.status().is_success() {
            return None;
        }
        r.json().await.ok()
    }

    /// The rebuild progress the builder published (`bg:{f}:progress`, as the origins read it
    /// for their stats): the generation being built and its phase. Read from Redis directly:
    /// one small GET, where an origin's stats of a large filter fan out over every segment and
    /// can take longer than a whole settle.
    /// Only progress whose phase started at or after `since_ms` (ms since the Unix epoch, this
    /// machine's clock, as the origins') counts: a builder killed earlier leaves its last
    /// progress behind until it expires, naming a newer generation than the active one.
    pub(super) async fn published_phase(&self, since_ms: u64) -> Option<(u64, Phase)> {
        let key = format!("bg:{{{}}}:progress", self.filter);
        let reply = self.redis_command(redis::cmd("GET").arg(&key)).await.ok()?;
        let redis::Value::BulkString(json) = reply else { return None };
        let progress: Value = serde_json::from_slice(&json).ok()?;
        if progress["started_ms"].as_u64()? < since_ms {
            return None;
        }
        Some((progress["generation"].as_u64()?, Phase::named(progress["phase"].as_str()?)?))
    }

    /// Stats from any running origin.
    pub(super) async fn any_stats(&self) -> Option<Value> {
        for _ in 0..self.cluster.origins.len() {
            if let Some(stats) = self.stats(self.live_origin(None)?).await {
                return Some(stats);
            }
        }
        None
    }

    /// Stats from any running origin, asked again until one answers or `limit` has passed (a
    /// background fault, slow Redis or a paused Cassandra, may hold them up for seconds).
    pub(super) async fn stats_within(&self, limit: Duration) -> anyhow::Result<Value> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(stats) = self.any_stats().await {
                return Ok(stats);
            }
            anyhow::ensure!(Instant::now() < deadline, "no origin answered stats within {limit:?}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The active generation, if an origin can tell.
    pub(super) async fn generation(&self) -> Option<u64> {
        self.any_stats().await.and_then(|s| s["generation"].as_u64())
    }

    /// The stats once a generation other than `other_than` is active and no build is under way,
    /// waiting up to `limit`; None if that did not happen in time. With `None`, any active
    /// generation will do: a fault on the filter's keys needs one, and right after a failover or
    /// a flush the origins are still rebuilding.
    pub(super) async fn settled_stats(&self, other_than: Option<u64>, limit: Duration) -> Option<Value> {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if let Some(stats) = self.any_stats().await {
                let generation = stats["generation"].as_u64();
                if generation.is_some() && generation != other_than && stats["building_generation"].is_null() {
                    return Some(stats);
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        None
    }

    /// Waits until a generation other than `from` is active and no build is under way.
    pub(super) async fn wait_switch(&self, from: Option<u64>, limit: Duration) -> bool {
        self.settled_stats(from, limit).await.is_some()
    }

    /// `POST /rebuild` on an origin; a 409 (another rebuild holds the lease) is retried.
    pub(super) async fn post_rebuild(&self, origin: u8, capacity: Option<u64>) -> anyhow::Result<()> {
        let url = format!("{}/v1/filters/{}/rebuild", self.cluster.origins[origin as usize].base, self.filter);
        let deadline = Instant::now() + Duration::from_secs(45);
        loop {
            let mut request = self.http.post(&url).bearer_auth(TOKEN);
            if let Some(capacity) = capacity {
                request = request.json(&json!({ "capacity": capacity }));
            }
            let (status, body) = match request.send().await {
                Ok(r) => (r.status().as_u16(), r.text().await.unwrap_or_default()),
                Err(e) => (0, e.to_string()),
            };
            if status == 202 {
                return Ok(());
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "rebuild on origin-{origin} not accepted within 45 s: {status} {body}"
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// Runs a command on the private Redis, or on a cluster routed as the cluster client
    /// routes it (by key; FLUSHALL on every master).
    pub(super) async fn redis_command(&self, cmd: &redis::Cmd) -> anyhow::Result<redis::Value> {
        let connect = Duration::from_secs(5);
        let answer = Duration::from_secs(30);
        if self.cluster.redis.is_some() {
            let client = redis::Client::open(self.cluster.redis_url())?;
            let mut conn = tokio::time::timeout(connect, client.get_multiplexed_async_connection())
                .await
                .context("connect to Redis")??;
            return Ok(tokio::time::timeout(answer, cmd.query_async(&mut conn)).await.context("Redis command")??);
        }
        let nodes = self.cluster.settings.redis_cluster.iter().map(|n| format!("redis://{n}"));
        let client = redis::cluster::ClusterClient::new(nodes.collect::<Vec<_>>())?;
        let mut conn =
            tokio::time::timeout(connect, client.get_async_connection()).await.context("connect to the cluster")??;
        Ok(tokio::time::timeout(answer, cmd.query_async(&mut conn)).await.context("Redis command")??)
    }
}
