//! The fault injectors and the two tracks that run them (see [`schedule`](super::schedule)).
//! Each fault is recorded with its window: from the injection to the end of the disturbance
//! (the process back, the proxy healed, or, for faults the origins must repair on their own,
//! a new filter generation active; or the wait for it over).

use super::cluster::{CassandraPause, Cluster};
use super::history::{unix_ms, Fault, FaultKind, Micros, Recorder};
use super::schedule::{background, sequential_round, Phase, Step, Timed, BACKGROUND_CYCLE};
use super::workload::Workload;
use anyhow::Context as _;
use bloomgate_tests::origin::TOKEN;
use bloomgate_tests::redis_cluster as redis_nodes;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How faults are injected.
#[derive(Clone, Debug, serde::Serialize)]
pub struct FaultSettings {
    /// How long to wait for the origins to repair the filter after a fault (a new generation
    /// active) before moving on.
    pub recovery_wait: Duration,
    /// Delay of every chunk through the Redis proxies during slow Redis: above the origins'
    /// lookup timeout.
    pub slow_redis_delay: Duration,
    /// The filter's starting capacity (small, so it resizes on its own).
    pub initial_capacity: u64,
    /// Capacity asked of the rebuild whose upload is killed: many segments, so the upload
    /// phase lasts long enough to be seen.
    pub upload_capacity: u64,
    /// Lookup rate multiplier of a burst.
    pub burst_factor: u32,
    /// Cassandra's pid, if known (for SIGSTOP).
    pub cassandra_pid: Option<u32>,
}

/// The injectors' shared state.
pub struct Faults {
    cluster: Arc<Cluster>,
    rec: Arc<Recorder>,
    workload: Arc<Workload>,
    http: reqwest::Client,
    filter: String,
    settings: FaultSettings,
    rng: Mutex<StdRng>,
    snapshot: Mutex<Option<(PathBuf, Micros)>>,
}

impl Faults {
    /// Injectors over a started cluster.
    pub fn new(
        cluster: Arc<Cluster>,
        rec: Arc<Recorder>,
        workload: Arc<Workload>,
        http: reqwest::Client,
        filter: String,
        settings: FaultSettings,
        seed: u64,
    ) -> Faults {
        Faults {
            cluster,
            rec,
            workload,
            http,
            filter,
            settings,
            rng: Mutex::new(StdRng::seed_from_u64(seed ^ 0xfa17)),
            snapshot: Mutex::new(None),
        }
    }

    fn note(&self, text: String) {
        self.rec.note(text);
    }

    fn random(&self, n: usize) -> usize {
        self.rng.lock().unwrap_or_else(|e| e.into_inner()).random_range(0..n)
    }

    fn record(&self, kind: FaultKind, start: Micros, origin: Option<u8>, recovered: Option<bool>, note: String) {
        eprintln!(
            "chaos: {:>7.1}s {} ({:.1}s){}: {note}",
            start as f64 / 1e6,
            kind.name(),
            (self.rec.now() - start) as f64 / 1e6,
            origin.map(|o| format!(" origin-{o}")).unwrap_or_default()
        );
        self.rec.fault(Fault { kind, start, end: self.rec.now(), origin, recovered, note });
    }

    /// An origin that is running, other than `avoid`.
    fn live_origin(&self, avoid: Option<u8>) -> Option<u8> {
        let live: Vec<u8> = self
            .cluster
            .origins
            .iter()
            .filter(|o| o.pid().is_some() && Some(o.index) != avoid)
            .map(|o| o.index)
            .collect();
        (!live.is_empty()).then(|| live[self.random(live.len())])
    }

    /// The filter's stats from one origin, if it answers 200.
    async fn stats(&self, origin: u8) -> Option<Value> {
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
    async fn published_phase(&self, since_ms: u64) -> Option<(u64, Phase)> {
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
    async fn any_stats(&self) -> Option<Value> {
        for _ in 0..self.cluster.origins.len() {
            if let Some(stats) = self.stats(self.live_origin(None)?).await {
                return Some(stats);
            }
        }
        None
    }

    /// The active generation, if an origin can tell.
    async fn generation(&self) -> Option<u64> {
        self.any_stats().await.and_then(|s| s["generation"].as_u64())
    }

    /// The stats once a generation other than `other_than` is active and no build is under way,
    /// waiting up to `limit`; None if that did not happen in time. With `None`, any active
    /// generation will do: a fault on the filter's keys needs one, and right after a failover or
    /// a flush the origins are still rebuilding.
    async fn settled_stats(&self, other_than: Option<u64>, limit: Duration) -> Option<Value> {
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
    async fn wait_switch(&self, from: Option<u64>, limit: Duration) -> bool {
        self.settled_stats(from, limit).await.is_some()
    }

    /// `POST /rebuild` on an origin; a 409 (another rebuild holds the lease) is retried.
    async fn post_rebuild(&self, origin: u8, capacity: Option<u64>) -> anyhow::Result<()> {
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
    async fn redis_command(&self, cmd: &redis::Cmd) -> anyhow::Result<redis::Value> {
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

    /// `kill -9` of a random master while the workload writes; waits for its replica to be
    /// promoted and for the origins to rebuild on the new masters (the promoted replica may
    /// lack the last bits the master acknowledged), then restarts the killed node.
    async fn kill_redis_master(&self) -> anyhow::Result<()> {
        let nodes = tokio::task::spawn_blocking(redis_nodes::list).await??;
        let masters: Vec<_> = nodes.iter().filter(|n| n.role == "master" && n.pid.is_some()).collect();
        anyhow::ensure!(!masters.is_empty(), "no running Redis master to kill: {nodes:?}");
        let victim = masters[self.random(masters.len())].clone();
        let heir = nodes.iter().find(|n| n.master_port == Some(victim.port)).map(|n| n.port);
        let before = self.generation().await;
        let start = self.rec.now();
        let killed = std::process::Command::new("kill")
            .args(["-KILL", &victim.pid.unwrap_or_default().to_string()])
            .status()
            .is_ok_and(|s| s.success());
        anyhow::ensure!(killed, "kill -9 of Redis master {} (pid {:?}) failed", victim.port, victim.pid);
        let promoted = Instant::now();
        let mut promoted_after = None;
        while promoted.elapsed() < self.settings.recovery_wait {
            let now = tokio::task::spawn_blocking(redis_nodes::list).await??;
            if now.iter().any(|n| Some(n.port) == heir && n.role == "master") {
                promoted_after = Some(promoted.elapsed());
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let recovered = self.wait_switch(before, self.settings.recovery_wait).await;
        tokio::task::spawn_blocking(redis_nodes::restart_dead_nodes).await??;
        let note = format!(
            "master {} (pid {:?}) killed; replica {heir:?} promoted after {}; the killed node restarted",
            victim.port,
            victim.pid,
            promoted_after.map_or("- (not seen)".into(), |d| format!("{} ms", d.as_millis()))
        );
        self.record(FaultKind::RedisMasterKill, start, None, Some(recovered && promoted_after.is_some()), note);
        Ok(())
    }

    /// Runs one sequential step.
    pub async fn step(&self, step: Step) -> anyhow::Result<()> {
        let wait = self.settings.recovery_wait;
        match step {
            Step::Pause(d) => tokio::time::sleep(d).await,
            Step::AutoResize => {
                let before = self.generation().await;
                let start = self.rec.now();
                let want = (self.settings.initial_capacity as usize * 3 / 2).max(1000);
                let stored = self.workload.preload(want, Duration::from_secs(60)).await;
                let recovered = self.wait_switch(before, wait.max(Duration::from_secs(30))).await;
                let capacity = self.any_stats().await.and_then(|s| s["capacity"].as_u64());
                let note = format!(
                    "{stored} keys written into a filter of capacity {}; capacity now {capacity:?}",
                    self.settings.initial_capacity
                );
                self.record(FaultKind::AutoResize, start, None, Some(recovered), note);
            }
            Step::Rebuild | Step::Resize => {
                let kind = if step == Step::Rebuild { FaultKind::Rebuild } else { FaultKind::Resize };
                let stats = self.any_stats().await.context("no origin answers stats")?;
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
                let recovered = self.wait_switch(before, wait).await;
                let note = match new {
                    Some(n) => format!("capacity {capacity} -> {n}"),
                    None => format!("capacity {capacity}"),
                };
                self.record(kind, start, Some(origin), Some(recovered), note);
            }
            Step::KillBuilder(phase) => self.kill_builder(phase).await?,
            Step::RedisMasterKill => self.kill_redis_master().await?,
            Step::RedisRestartEmpty => {
                let before = self.generation().await;
                let start = self.rec.now();
                self.cluster.with_redis(|r| r.restart())?;
                let recovered = self.wait_switch(before, wait).await;
                self.record(
                    FaultKind::RedisRestartEmpty,
                    start,
                    None,
                    Some(recovered),
                    "kill -9, restarted empty".into(),
                );
            }
            Step::FlushAll => {
                let before = self.generation().await;
                let start = self.rec.now();
                self.redis_command(&redis::cmd("FLUSHALL")).await?;
                let recovered = self.wait_switch(before, wait).await;
                self.record(FaultKind::FlushAll, start, None, Some(recovered), String::new());
            }
            Step::DelSegmentBits | Step::DelSegmentVer | Step::DelMeta => {
                let stats = self
                    .settled_stats(None, wait)
                    .await
                    .with_context(|| format!("no active generation within {wait:?}"))?;
                let generation = stats["generation"].as_u64().context("no active generation")?;
                let segments = stats["segment_count"].as_u64().unwrap_or(1).max(1) as usize;
                let index = self.random(segments);
                let f = &self.filter;
                let (kind, key) = match step {
                    Step::DelSegmentBits => {
                        (FaultKind::DelSegmentBits, format!("bg:{{{f}:{generation}:{index}}}:bits"))
                    }
                    Step::DelSegmentVer => (FaultKind::DelSegmentVer, format!("bg:{{{f}:{generation}:{index}}}:ver")),
                    _ => (FaultKind::DelMeta, format!("bg:{{{f}}}:meta")),
                };
                let start = self.rec.now();
                let deleted = self.redis_command(redis::cmd("DEL").arg(&key)).await?;
                anyhow::ensure!(deleted == redis::Value::Int(1), "DEL {key} deleted nothing ({deleted:?})");
                let recovered = self.wait_switch(Some(generation), wait).await;
                self.record(kind, start, None, Some(recovered), format!("DEL {key} ({segments} segments)"));
            }
            Step::StaleDeletes => {
                let stats = self.any_stats().await.context("no origin answers stats")?;
                let before = stats["generation"].as_u64();
                let keys = stats["estimated_keys"].as_u64().unwrap_or(0) as f64;
                let share = self.cluster.settings.tuning.auto_stale_delete_share;
                // Half as many again as the threshold: the estimate is noisy.
                let n = (keys * share * 1.5).ceil() as usize + 10;
                let start = self.rec.now();
                let deleted = self.workload.delete_burst(n, Duration::from_secs(60)).await;
                let recovered = self.wait_switch(before, wait).await;
                let note = format!(
                    "{deleted} keys deleted at once; the filter held about {keys} keys, threshold share {share}"
                );
                self.record(FaultKind::StaleDeletes, start, None, Some(recovered), note);
            }
            Step::Snapshot => {
                self.redis_command(&redis::cmd("SAVE")).await?;
                let aside = self.cluster.settings.dir.join("snapshot.rdb");
                let from = self.cluster.with_redis(|r| r.snapshot_path())?;
                std::fs::copy(&from, &aside).with_context(|| format!("copy {}", from.display()))?;
                *self.snapshot.lock().unwrap_or_else(|e| e.into_inner()) = Some((aside, self.rec.now()));
            }
            Step::Rollback => {
                let (path, taken) =
                    self.snapshot.lock().unwrap_or_else(|e| e.into_inner()).clone().context("no snapshot taken")?;
                let start = self.rec.now();
                self.cluster.with_redis(|r| r.restart_from(&path))?;
                let restored = self.generation().await;
                let recovered = self.wait_switch(restored, wait).await;
                let note = format!(
                    "kill -9, restarted from the snapshot of {:.1}s ({:.1}s of bits lost); generation {restored:?} restored",
                    taken as f64 / 1e6,
                    (start - taken) as f64 / 1e6
                );
                self.record(FaultKind::RedisRollback, start, None, Some(recovered), note);
            }
        }
        Ok(())
    }

    /// Starts a rebuild on a random origin, watches its phase from another origin's stats,
    /// and `kill -9`s it in `phase`; then restarts it. A rebuild that ends before the phase is
    /// seen is retried (at most three times).
    async fn kill_builder(&self, phase: Phase) -> anyhow::Result<()> {
        for attempt in 1..=3 {
            let builder = self.live_origin(None).context("no origin running")?;
            let watcher = self.live_origin(Some(builder)).context("no second origin running")?;
            let stats = self.any_stats().await.context("no origin answers stats")?;
            let before = stats["generation"].as_u64();
            let origin = &self.cluster.origins[builder as usize];
            let capacity = (phase == Phase::Uploading)
                .then(|| stats["capacity"].as_u64().unwrap_or(0).max(self.settings.upload_capacity));
            if let (Phase::Uploading, Some(proxy)) = (phase, &origin.redis_proxy) {
                // Slow the builder's own Redis a little (below every timeout): its upload of
                // many segments then takes long enough to be seen.
                proxy.slow(Duration::from_millis(10));
            }
            let posted_ms = unix_ms();
            let posted = self.post_rebuild(builder, capacity).await;
            let asked = Instant::now();
            // A rebuild that failed (it leaves no trace in the stats but its stale
            // `building_generation`) is given up on after the settle plus half a minute.
            let limit = Duration::from_millis(self.cluster.settings.tuning.rebuild_settle_ms) + Duration::from_secs(30);
            let mut killed = None;
            let newer = |generation: u64| before.is_none_or(|b| generation > b);
            while posted.is_ok() && asked.elapsed() < limit {
                // The published progress first (cheap, so polled often enough to catch a phase
                // of a few seconds); the watcher's stats too, but never waited on for long: on a
                // large filter they can take longer than the phase lasts.
                let published = self.published_phase(posted_ms).await.filter(|(generation, _)| newer(*generation));
                let stats = tokio::time::timeout(Duration::from_millis(500), self.stats(watcher)).await.ok().flatten();
                let in_phase = published.is_some_and(|(_, seen)| seen == phase)
                    || stats.as_ref().is_some_and(|s| s["rebuild"]["phase"].as_str() == Some(phase.name()));
                if in_phase {
                    let at = self.rec.now();
                    origin.kill9();
                    killed = Some((at, asked.elapsed()));
                    break;
                }
                if published.is_some_and(|(_, seen)| seen > phase) {
                    break; // went past the phase before it was seen
                }
                if let Some(stats) = stats {
                    let generation = stats["generation"].as_u64();
                    if stats["building_generation"].is_null() && generation.is_some() && generation != before {
                        break; // finished before the phase was seen
                    }
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            if let Some(proxy) = &origin.redis_proxy {
                proxy.heal();
            }
            posted?;
            let Some((at, after)) = killed else {
                self.note(format!(
                    "attempt {attempt} to kill origin-{builder} while {} missed the phase",
                    phase.name()
                ));
                continue;
            };
            let restarted = Instant::now();
            origin.start(&self.http).await?;
            let note = format!(
                "killed {} ms after the rebuild was accepted{}, restarted in {} ms",
                after.as_millis(),
                capacity.map(|c| format!(" (capacity {c})")).unwrap_or_default(),
                restarted.elapsed().as_millis()
            );
            self.record(phase.kill_fault(), at, Some(builder), None, note);
            return Ok(());
        }
        anyhow::bail!("could not catch a rebuild while {} in 3 attempts", phase.name())
    }

    /// Runs one background fault.
    pub async fn timed(&self, t: Timed) -> anyhow::Result<()> {
        let start = self.rec.now();
        match t.fault {
            FaultKind::EdgeCut => {
                let edge = self.cluster.edge.as_ref().context("no edge")?;
                self.workload.edge_cut.store(true, Ordering::SeqCst);
                edge.proxy.cut();
                tokio::time::sleep(t.length).await;
                edge.proxy.heal();
                self.workload.edge_cut.store(false, Ordering::SeqCst);
                self.record(t.fault, start, Some(0), None, format!("edge to origin-0 cut for {:?}", t.length));
            }
            FaultKind::CassandraPause => {
                let pid = self.settings.cassandra_pid.context(
                    "Cassandra's pid is unknown: set BLOOMGATE_CASSANDRA_PID_FILE (scripts/services writes .state/run/cassandra.pid)",
                )?;
                let pause = CassandraPause::stop(pid)?;
                tokio::time::sleep(t.length).await;
                drop(pause);
                self.record(t.fault, start, None, None, format!("SIGSTOP pid {pid} for {:?}, then SIGCONT", t.length));
            }
            FaultKind::SlowRedis => {
                anyhow::ensure!(self.cluster.redis.is_some(), "slow Redis needs the private Redis's proxies");
                for proxy in self.cluster.redis_proxies() {
                    proxy.slow(self.settings.slow_redis_delay);
                }
                tokio::time::sleep(t.length).await;
                for proxy in self.cluster.redis_proxies() {
                    proxy.heal();
                }
                let note = format!("every Redis chunk delayed {:?} for {:?}", self.settings.slow_redis_delay, t.length);
                self.record(t.fault, start, None, None, note);
            }
            FaultKind::LookupBurst => {
                self.workload.burst.store(self.settings.burst_factor, Ordering::Relaxed);
                tokio::time::sleep(t.length).await;
                self.workload.burst.store(1, Ordering::Relaxed);
                let note = format!("{}x lookups for {:?}", self.settings.burst_factor, t.length);
                self.record(t.fault, start, None, None, note);
            }
            other => anyhow::bail!("{} is not a background fault", other.name()),
        }
        Ok(())
    }

    /// The sequential track: rounds of [`sequential_round`] until `until`, the first round
    /// always to its end.
    pub async fn sequential_track(self: Arc<Self>, until: Instant) {
        for round in 0.. {
            for step in sequential_round(round == 0, self.cluster.settings.redis_kind()) {
                if round > 0 && Instant::now() >= until {
                    return;
                }
                if let Err(e) = self.step(step).await {
                    self.note(format!("{step:?} failed: {e:#}"));
                }
            }
            if Instant::now() >= until {
                return;
            }
        }
    }

    /// The background track: cycles of [`background`] from `started` until `until`, the first
    /// cycle always to its end.
    pub async fn background_track(self: Arc<Self>, started: Instant, until: Instant) {
        let edge = self.cluster.edge.is_some();
        for cycle in 0u32.. {
            let base = started + BACKGROUND_CYCLE * cycle;
            for t in background(edge, self.cluster.settings.redis_kind()) {
                let at = base + t.offset;
                if cycle > 0 && at >= until {
                    return;
                }
                tokio::time::sleep_until(at.into()).await;
                if let Err(e) = self.timed(t).await {
                    self.note(format!("{} failed: {e:#}", t.fault.name()));
                }
            }
        }
    }
}
