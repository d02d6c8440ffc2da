//! The fault injectors and the two tracks that run them (see [`schedule`](crate::schedule)).
//! Each fault is recorded with its window: from the injection to the end of the disturbance
//! (the process back, the proxy healed, or, for faults the origins must repair on their own,
//! a new filter generation active; or the wait for it over).
//!
//! # Layout
//! - this file: the injectors' state, how a fault is recorded, the two tracks, the timed
//!   (background) faults.
//! - [`steps`]: the sequential steps: rebuilds, resizes, Redis lost, keys deleted, rollbacks.
//! - [`kills`]: `kill -9` of a rebuilding origin in a given phase, and of a Redis master.
//! - [`checkpoints`]: Redis emptied right after a checkpoint, during one, and during a
//!   recovery's replay; the journal deleted.
//! - [`edge_behind`]: the edge cut off until the journal is trimmed past what it holds.
//! - [`filter_state`]: what the injectors read of the filter: stats, generation, rebuild phase.

mod checkpoints;
mod edge_behind;
mod filter_state;
mod kills;
mod steps;

use crate::cassandra::CassandraPause;
use crate::cluster::Cluster;
use crate::history::{Fault, FaultKind, Micros, Recorder};
use crate::schedule::{Schedule, Timed, BACKGROUND_CYCLE};
use crate::workload::Workload;
use anyhow::Context as _;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
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
    /// Which faults.
    pub schedule: Schedule,
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

    pub(crate) fn note(&self, text: String) {
        self.rec.note(text);
    }

    fn random(&self, n: usize) -> usize {
        self.rng.lock().unwrap_or_else(|e| e.into_inner()).random_range(0..n)
    }

    fn record(&self, kind: FaultKind, start: Micros, origin: Option<u8>, recovered: Option<bool>, note: String) {
        self.record_fault(Fault { kind, start, end: self.rec.now(), origin, recovered, note, copy_held: None });
    }

    /// Records a fault, ended now.
    fn record_fault(&self, fault: Fault) {
        let Fault { kind, start, origin, note, .. } = &fault;
        eprintln!(
            "chaos: {:>7.1}s {} ({:.1}s){}: {note}",
            *start as f64 / 1e6,
            kind.name(),
            (self.rec.now() - start) as f64 / 1e6,
            origin.map(|o| format!(" origin-{o}")).unwrap_or_default()
        );
        self.rec.fault(Fault { end: self.rec.now(), ..fault });
    }

    /// Waits up to `limit` until some origin holds a local copy of the filter (lookups load
    /// one): a Redis that goes back in time must find a copy to make stale. Whether one was.
    async fn await_copy_held(&self, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        loop {
            if crate::origin_metrics::any_copy_held(&self.cluster, &self.http).await {
                return true;
            }
            if Instant::now() >= deadline {
                self.note(format!("no origin held a local copy within {limit:?}"));
                return false;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
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
                    "Cassandra's pid is unknown: set BG_CASSANDRA_PID_FILE (scripts/services writes .state/run/cassandra.pid)",
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
            let edge = self.cluster.edge.is_some();
            for step in self.settings.schedule.round(round == 0, self.cluster.settings.redis_kind(), edge) {
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
        let track = self.settings.schedule.background(self.cluster.edge.is_some(), self.cluster.settings.redis_kind());
        if track.is_empty() {
            return;
        }
        for cycle in 0u32.. {
            let base = started + BACKGROUND_CYCLE * cycle;
            for t in track.iter().copied() {
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
