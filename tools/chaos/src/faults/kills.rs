//! The `kill -9` faults: an origin killed while it rebuilds, in a given phase of its rebuild,
//! and a Redis Cluster master killed while the workload writes.

use super::Faults;
use crate::history::{unix_ms, Fault, FaultKind, Micros};
use crate::origin_process::Origin;
use crate::schedule::Phase;
use anyhow::Context as _;
use bloomgate_tests::procs::signal;
use bloomgate_tests::redis_cluster as redis_nodes;
use std::time::{Duration, Instant};

/// Rebuilds started to catch one in a phase before the fault is given up (and the run fails
/// its floor of every fault kind injected).
const KILL_ATTEMPTS: u32 = 5;

impl Faults {
    /// Starts a rebuild on a random origin, watches its phase from another origin's stats,
    /// and `kill -9`s it in `phase`; then restarts it. A rebuild that ends before the phase is
    /// seen is retried (at most [`KILL_ATTEMPTS`] times).
    pub(super) async fn kill_builder(&self, phase: Phase) -> anyhow::Result<()> {
        for attempt in 1..=KILL_ATTEMPTS {
            let builder = self.live_origin(None).context("no origin running")?;
            let watcher = self.live_origin(Some(builder)).context("no second origin running")?;
            // A rebuild already under way (a recovery after the fault before) would take this
            // one's request and may be past the phase: wait for it to end first.
            let stats = match self.settled_stats(None, self.settings.recovery_wait).await {
                Some(stats) => stats,
                None => self.stats_within(self.settings.recovery_wait).await?,
            };
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
            let killed = match posted {
                Ok(()) => self.kill_in_phase(origin, watcher, phase, before, posted_ms, asked).await,
                Err(_) => None,
            };
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
        anyhow::bail!("could not catch a rebuild while {} in {KILL_ATTEMPTS} attempts", phase.name())
    }

    /// Watches the rebuild `origin` was asked for (`asked`, its phase published since
    /// `posted_ms`) and `kill -9`s it once it is in `phase`: when, and how long after it was
    /// asked. None if the rebuild went past the phase, finished, or failed before it was seen.
    async fn kill_in_phase(
        &self,
        origin: &Origin,
        watcher: u8,
        phase: Phase,
        before: Option<u64>,
        posted_ms: u64,
        asked: Instant,
    ) -> Option<(Micros, Duration)> {
        // A rebuild that failed (it leaves no trace in the stats but its stale
        // `building_generation`) is given up on after the settle plus half a minute.
        let limit = Duration::from_millis(self.cluster.settings.tuning.rebuild_settle_ms) + Duration::from_secs(30);
        let newer = |generation: u64| before.is_none_or(|b| generation > b);
        while asked.elapsed() < limit {
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
                return Some((at, asked.elapsed()));
            }
            if published.is_some_and(|(_, seen)| seen > phase) {
                return None; // went past the phase before it was seen
            }
            if let Some(stats) = stats {
                let generation = stats["generation"].as_u64();
                if stats["building_generation"].is_null() && generation.is_some() && generation != before {
                    return None; // finished before the phase was seen
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        None
    }

    /// `kill -9` of a random master while the workload writes; waits for its replica to be
    /// promoted and for the origins to rebuild on the new masters (the promoted replica may
    /// lack the last bits the master acknowledged), then restarts the killed node.
    pub(super) async fn kill_redis_master(&self) -> anyhow::Result<()> {
        let nodes = tokio::task::spawn_blocking(redis_nodes::list).await??;
        let masters: Vec<_> = nodes.iter().filter(|n| n.role == "master" && n.pid.is_some()).collect();
        anyhow::ensure!(!masters.is_empty(), "no running Redis master to kill: {nodes:?}");
        let victim = masters[self.random(masters.len())].clone();
        let heir = nodes.iter().find(|n| n.master_port == Some(victim.port)).map(|n| n.port);
        let before = self.generation().await;
        let copy_held = self.await_copy_held(super::steps::COPY_WAIT).await;
        let start = self.rec.now();
        let killed = signal(victim.pid.unwrap_or_default(), "KILL");
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
        let recovered = Some(recovered && promoted_after.is_some());
        let kind = FaultKind::RedisMasterKill;
        self.record_fault(Fault { kind, start, end: 0, origin: None, recovered, note, copy_held: Some(copy_held) });
        Ok(())
    }
}
