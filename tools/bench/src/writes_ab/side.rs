//! One side of the writes A/B in one round: the writes-only phase against the origin (what
//! the journal costs the write path), then the front serving lookups at a fixed rate while the
//! same keys are written and a sampled share of them is followed until "seen".

use super::isolate::IsolateFigures;
use super::results::{per, scaled, FrontRun, OriginWrites, WriteFigures, WriteRun};
use super::{Shared, Side};
use crate::counters::{RedisCommands, Samples};
use crate::counting_proxy::{CountingProxy, ProxyTally};
use crate::cpu::{descendants, wait_quiet, CpuGroup, CpuReading};
use crate::driver::{drive, DriveSpec, DriveStats, Errors};
use crate::filters::filter_stats;
use crate::servers::Server;
use crate::writes::{lag_quantile_ms, write, ProbeSpec, WriteSpec, WriteStats};
use bloomgate_client::api::IsolateReport;
use bloomgate_tests::edge::{isolate_report, Options, Wrangler};
use bloomgate_tests::origin::EDGE_SECRET;
use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant};

/// One side in one round: the writes-only phase, then the front.
pub(crate) async fn run_side(
    sh: &Shared<'_>,
    http: &reqwest::Client,
    origin: &Server,
    filter: &str,
    side: Side,
    round: usize,
) -> anyhow::Result<WriteRun> {
    let run = SideRun { sh, http, origin, filter, side, round };
    let cfg = sh.cfg;
    let mut groups = sh.base_groups.clone();
    if origin.pid != std::process::id() {
        groups.push(CpuGroup { name: "origin".into(), pids: vec![origin.pid] });
    }
    if !cfg.quiet_wait.is_zero() {
        let others = wait_quiet(&groups, cfg.quiet_wait).await;
        cfg.step(&format!("  others on the machine: {others:.2} cores"));
    }
    let origin_writes = if sh.w.origin_duration.is_zero() { None } else { Some(run.writes_only(&groups).await?) };
    let front = run.front(groups).await?;
    Ok(WriteRun {
        side: side.name().into(),
        journal_enabled: side == Side::Journal,
        round,
        filter: filter.to_owned(),
        origin_writes,
        front,
        filter_stats: filter_stats(&origin.base, filter).await,
    })
}

/// What one side's round works with.
struct SideRun<'a> {
    sh: &'a Shared<'a>,
    http: &'a reqwest::Client,
    origin: &'a Server,
    filter: &'a str,
    side: Side,
    round: usize,
}

/// A running edge: `wrangler dev` through a counting proxy, with its own state directory.
struct Front {
    edge: Wrangler,
    proxy: CountingProxy,
    state: std::path::PathBuf,
}

/// The front's counters around the measured run: the counting proxy's tally (with an edge),
/// the edge isolate's report, the origin's samples, CPU.
struct FrontReading {
    traffic: Option<ProxyTally>,
    isolate: Option<IsolateReport>,
    origin: Samples,
    cpu: CpuReading,
}

impl SideRun<'_> {
    /// Writes at the A/B's rate into this side's filter, during `phase`.
    fn writes(&self, phase: &str, duration: Duration, probe: Option<ProbeSpec>) -> WriteSpec {
        let (sh, round) = (self.sh, self.round);
        WriteSpec {
            // The same label on both sides: both write the same keys, each into its own filter.
            label: format!("{}/r{round}/{phase}", sh.write_salt),
            seed: sh.cfg.seed,
            origin: self.origin.base.clone(),
            filter: self.filter.to_owned(),
            rate: sh.w.rate,
            connections: sh.w.writers,
            duration,
            probe,
        }
    }

    /// The writes-only phase: what the write path costs the origin, Redis and Cassandra.
    async fn writes_only(&self, groups: &[CpuGroup]) -> anyhow::Result<OriginWrites> {
        let (cfg, w, http) = (self.sh.cfg, self.sh.w, self.http);
        cfg.step(&format!("round {}, {}: {} writes/s to the origin alone", self.round, self.side.name(), w.rate));
        let r0 = RedisCommands::read(&cfg.redis_url).await;
        let (m0, c0) = (Samples::scrape(http, &self.origin.base).await?, CpuReading::now(groups));
        let stats = write(&self.writes("origin", w.origin_duration, None)).await?;
        let (m1, c1) = (Samples::scrape(http, &self.origin.base).await?, CpuReading::now(groups));
        let r1 = RedisCommands::read(&cfg.redis_url).await;
        let secs = c1.since(&c0, groups);
        let per_write = 1.0 / stats.acked.max(1) as f64;
        let redis = match (r0, r1) {
            (Some(a), Some(b)) => b.since(&a),
            _ => BTreeMap::new(),
        };
        Ok(OriginWrites {
            writes: WriteFigures::of(&stats),
            origin_writes_counted: m1.delta(&m0, "bloomgate_writes_total"),
            cpu_us_per_write: scaled(&secs, 1e6 * per_write),
            cpu_cores: scaled(&secs, 1.0 / stats.seconds.max(1e-9)),
            redis_calls_per_write: redis.iter().map(|(k, (c, _))| (k.clone(), *c as f64 * per_write)).collect(),
            redis_usec_per_write: redis.iter().map(|(k, (_, u))| (k.clone(), *u as f64 * per_write)).collect(),
        })
    }

    /// Starts `wrangler dev` (S from the config) through a counting proxy in front of this side's
    /// origin, and adds its processes to `groups`; none without an edge. Dropped, the edge stops
    /// before the proxy it talks through.
    async fn start_edge(&self, groups: &mut Vec<CpuGroup>) -> anyhow::Result<Option<Front>> {
        let Some(s) = self.sh.cfg.edge_freshness_secs else { return Ok(None) };
        let me = std::process::id();
        let known: HashSet<u32> = descendants(me).into_iter().collect();
        let what = format!(
            "round {}, {}: starting wrangler dev (S = {s} s) through a counting proxy",
            self.round,
            self.side.name()
        );
        self.sh.cfg.step(&what);
        let proxy = CountingProxy::start(self.origin.base.trim_start_matches("http://")).await?;
        let mut options = Options::new(s);
        options.vars.extend(self.sh.w.edge_vars.iter().cloned());
        // The Cache API's entries of this run only: an earlier run's would be read back.
        let state = std::env::temp_dir().join(format!("bloomgate-writes-{:016x}", rand::random::<u64>()));
        options.persist_to = Some(state.clone());
        let edge = Wrangler::start_with(&format!("http://{}", proxy.addr), EDGE_SECRET, options).await;
        let pids = descendants(me).into_iter().filter(|p| !known.contains(p)).collect();
        groups.push(CpuGroup { name: "edge".into(), pids });
        Ok(Some(Front { edge, proxy, state }))
    }

    /// The front (the edge, or the origin itself) serving lookups at a fixed rate while keys are
    /// written and followed.
    async fn front(&self, mut groups: Vec<CpuGroup>) -> anyhow::Result<FrontRun> {
        let (cfg, w) = (self.sh.cfg, self.sh.w);
        let front = self.start_edge(&mut groups).await?;
        let front_base = front.as_ref().map_or(self.origin.base.clone(), |f| f.edge.base.clone());
        let bound = Duration::from_secs(u64::from(cfg.edge_freshness_secs.unwrap_or(0)));
        let cap = bound + w.probe_margin;
        let lookups = |label: &str, duration: Duration| DriveSpec {
            label: format!("fresh/r{}/{label}", self.round),
            base: front_base.clone(),
            filter: self.filter.to_owned(),
            connections: w.lookup_connections,
            duration: Some(duration),
            max_lookups: None,
            rate: (w.lookup_rate > 0.0).then_some(w.lookup_rate),
            progress: false,
        };
        let at = if front.is_some() { "edge" } else { "origin" };
        let (round, side) = (self.round, self.side.name());
        cfg.step(&format!("round {round}, {side}: {} lookups/s at the {at} and {} writes/s", w.lookup_rate, w.rate));
        if !w.warmup.is_zero() {
            let (ls, ws) = (lookups("warmup", w.warmup), self.writes("warmup", w.warmup, None));
            let (l, wr) = tokio::join!(drive(&ls, &self.sh.workload), write(&ws));
            l?;
            wr?;
        }
        let probe = ProbeSpec {
            front: front_base.clone(),
            every: w.probe_every.max(1),
            interval: w.probe_interval,
            bound,
            cap,
            // Keys acknowledged later could still be followed after the window closes.
            window: w.duration.checked_sub(cap).filter(|d| !d.is_zero()).unwrap_or(w.duration / 2),
        };
        let proxy = front.as_ref().map(|f| (&f.proxy, f.edge.base.as_str()));
        let t0 = self.read_front(proxy, &groups).await?;
        let started = Instant::now();
        let ls = DriveSpec { progress: cfg.progress, ..lookups("measured", w.duration) };
        let ws = self.writes("front", w.duration, Some(probe));
        let (l, wr) = tokio::join!(drive(&ls, &self.sh.workload), write(&ws));
        let (looked, wrote) = (l?, wr?);
        let seconds = started.elapsed().as_secs_f64();
        let t1 = self.read_front(proxy, &groups).await?;
        if let Some(Front { edge, proxy, state }) = front {
            // The edge stops before the proxy it talks through.
            drop(edge);
            drop(proxy);
            let _ = std::fs::remove_dir_all(state);
        }
        let cpu = cores_busy(&t0, &t1, &groups, seconds);
        Ok(front_figures(cfg.edge_freshness_secs, bound, looked, wrote, &t0, &t1, cpu))
    }

    async fn read_front(
        &self,
        edge: Option<(&CountingProxy, &str)>,
        groups: &[CpuGroup],
    ) -> anyhow::Result<FrontReading> {
        let isolate = match edge {
            Some((_, base)) => isolate_report(self.http, base).await.ok(),
            None => None,
        };
        Ok(FrontReading {
            traffic: edge.map(|(p, _)| p.counts.tally()),
            isolate,
            origin: Samples::scrape(self.http, &self.origin.base).await?,
            cpu: CpuReading::now(groups),
        })
    }
}

/// Cores busy on average per group between two readings `seconds` apart.
fn cores_busy(t0: &FrontReading, t1: &FrontReading, groups: &[CpuGroup], seconds: f64) -> BTreeMap<String, f64> {
    scaled(&t1.cpu.since(&t0.cpu, groups), 1.0 / seconds.max(1e-9))
}

/// The front run's figures, from what the lookups and the writes measured and the counters
/// around them.
fn front_figures(
    freshness_secs: Option<u32>,
    bound: Duration,
    looked: DriveStats,
    wrote: WriteStats,
    t0: &FrontReading,
    t1: &FrontReading,
    cpu_cores: BTreeMap<String, f64>,
) -> FrontRun {
    let probe_polls: u64 = wrote.probes.iter().map(|p| p.polls).sum();
    let front_lookups = looked.lookups + probe_polls;
    let traffic = match (t0.traffic, t1.traffic) {
        (Some(a), Some(b)) => Some(b.since(&a)),
        _ => None,
    };
    let isolate = match (&t0.isolate, &t1.isolate) {
        (Some(a), Some(b)) => Some(IsolateFigures::between(a, b, front_lookups)),
        _ => None,
    };
    let thousand = front_lookups as f64 / 1000.0;
    let mut origin_served = BTreeMap::new();
    for kind in ["manifest", "segment", "journal"] {
        let sample = format!("bloomgate_edge_requests_total{{kind=\"{kind}\"}}");
        origin_served.insert(kind.to_owned(), t1.origin.delta(&t0.origin, &sample));
    }
    FrontRun {
        front: match freshness_secs {
            Some(s) => format!("wrangler dev in front of the origin, S = {s} s"),
            None => "the origin itself".into(),
        },
        bound_secs: bound.as_secs_f64(),
        lookups: looked.lookups,
        lookups_per_sec: looked.rate(),
        lookup_p50_ms: looked.quantile_ms(0.5),
        lookup_p99_ms: looked.quantile_ms(0.99),
        lookup_errors: looked.errors.clone(),
        answered_by: looked.answered_by.clone(),
        writes: WriteFigures::of(&wrote),
        probes: wrote.probes.len() as u64,
        never_seen: wrote.probes.iter().filter(|p| p.lag_ms.is_none()).count() as u64,
        probe_polls,
        probe_errors: wrote.probes.iter().fold(Errors::default(), |mut all, p| {
            all.add(&p.errors);
            all
        }),
        lag_p50_ms: lag_quantile_ms(&wrote.probes, 0.5),
        lag_p99_ms: lag_quantile_ms(&wrote.probes, 0.99),
        lag_max_ms: lag_quantile_ms(&wrote.probes, 1.0),
        wrong_answers: looked.wrong_answers + wrote.probes.iter().map(|p| p.late_not_seen).sum::<u64>(),
        front_lookups,
        traffic,
        requests_per_1k_lookups: traffic.map(|t| per(&t.requests, thousand)).unwrap_or_default(),
        bytes_per_1k_lookups: traffic.map(|t| per(&t.body_bytes, thousand)).unwrap_or_default(),
        bytes_per_write: traffic.map(|t| per(&t.body_bytes, wrote.acked as f64)).unwrap_or_default(),
        origin_served,
        cpu_cores,
        isolate,
        probe_outcomes: wrote.probes,
    }
}
