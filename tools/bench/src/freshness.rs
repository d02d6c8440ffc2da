//! Issue 10's A/B: how fresh the edge stays under writes, and what that costs in bytes from
//! the origin per write, with the origin's insert journal on and off, side by side in one run.
//!
//! Two origins (`journal_enabled` true and false) over the same Redis and Cassandra, one filter
//! each, preloaded with the same keys. For each round and side: a writes-only phase against the
//! origin (what the journal costs the write path: latency, origin and Redis CPU per write), then
//! the front (`wrangler dev` through a [`CountingProxy`], or the origin itself when there is no
//! edge) serves lookups at a fixed rate while the same keys are written at a fixed rate and a
//! sampled share of them is followed until the front answers "seen". The sides alternate order
//! from round to round, so a machine getting busier does not favour one.

use super::bench::{filter_stats, preload, BenchConfig, FilterSpec};
use super::driver::{drive, DriveSpec, Errors};
use super::probe::{descendants, machine_busy_seconds, pids_matching, wait_quiet, CpuGroup, RedisCommands, Samples};
use super::proxy::{CountingProxy, PerKind, ProxyTally};
use super::report::Check;
use super::servers::{start_origin, OriginSettings, Server};
use super::workload::{present_keys, Workload};
use super::writes::{lag_quantile_ms, write, ProbeOutcome, ProbeSpec, WriteSpec, WriteStats};
use bloomgate_tests::edge::Wrangler;
use bloomgate_tests::origin::EDGE_SECRET;
use serde::Serialize;
use std::collections::{BTreeMap, HashSet};
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The write A/B's settings (the seed, fp_rate, miss share, services and S come from
/// [`BenchConfig`]).
#[derive(Clone, Debug)]
pub struct WritesConfig {
    /// Keys written per second, W.
    pub rate: f64,
    /// Connections the writes go over.
    pub writers: usize,
    /// Keys preloaded into each side's filter.
    pub present: usize,
    /// Segment size of those filters; `None` = the origin's default (64 KiB), what edges fetch.
    pub segment_bytes: Option<u64>,
    /// Lookups per second at the front (fixed, the same for both sides); 0 = closed loop.
    pub lookup_rate: f64,
    /// Connections the lookups go over.
    pub lookup_connections: usize,
    /// Measured time of each side's front run.
    pub duration: Duration,
    /// Lookups and writes before it, unmeasured (the edge fetches its segments).
    pub warmup: Duration,
    /// Writes-only phase against the origin before each front run; zero = none.
    pub origin_duration: Duration,
    /// A/B pairs, alternating which side goes first.
    pub rounds: usize,
    /// Follow one acknowledged key in this many.
    pub probe_every: u64,
    /// Time between two lookups of a followed key.
    pub probe_interval: Duration,
    /// Followed for S plus this long before it counts as never seen.
    pub probe_margin: Duration,
    /// The filters of an earlier A/B run with the same seed and `present` (journal side, then
    /// no-journal side) to measure again instead of preloading new ones: another write rate on
    /// the same filters, without an hour of preload on this machine.
    pub reuse_filters: Option<[String; 2]>,
}

/// One side of the A/B.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Side {
    Journal,
    NoJournal,
}

impl Side {
    fn name(self) -> &'static str {
        match self {
            Side::Journal => "journal",
            Side::NoJournal => "no-journal",
        }
    }
}

/// Writes, their latency and errors in one phase.
#[derive(Clone, Debug, Serialize)]
pub struct WriteFigures {
    /// Writes acknowledged.
    pub writes: u64,
    /// Seconds of the phase.
    pub seconds: f64,
    /// Acknowledged writes per second.
    pub writes_per_sec: f64,
    /// Latency from when the write was due, ms.
    pub p50_ms: f64,
    /// 99th percentile, ms.
    pub p99_ms: f64,
    /// Slowest, ms.
    pub max_ms: f64,
    /// Failed writes.
    pub errors: Errors,
}

impl WriteFigures {
    fn of(s: &WriteStats) -> WriteFigures {
        WriteFigures {
            writes: s.acked,
            seconds: s.seconds,
            writes_per_sec: s.rate(),
            p50_ms: s.quantile_ms(0.5),
            p99_ms: s.quantile_ms(0.99),
            max_ms: s.latency_us.max() as f64 / 1000.0,
            errors: s.errors.clone(),
        }
    }
}

/// The writes-only phase: what the write path costs the origin.
#[derive(Clone, Debug, Serialize)]
pub struct OriginWrites {
    /// The writes.
    pub writes: WriteFigures,
    /// The origin's own count of acknowledged writes (cross-check).
    pub origin_writes_counted: f64,
    /// CPU per acknowledged write by process group, µs.
    pub cpu_us_per_write: BTreeMap<String, f64>,
    /// Redis commands per acknowledged write, by command (Redis's own count; commands run by a
    /// script count under their names too; other clients of the same Redis would show here).
    pub redis_calls_per_write: BTreeMap<String, f64>,
    /// Redis's time per acknowledged write by command, µs (a script's includes its commands').
    pub redis_usec_per_write: BTreeMap<String, f64>,
    /// CPU by process group, cores busy on average.
    pub cpu_cores: BTreeMap<String, f64>,
}

/// The front serving lookups while keys are written.
#[derive(Clone, Debug, Serialize)]
pub struct FrontRun {
    /// What served the lookups.
    pub front: String,
    /// Its freshness bound, s: 0 for the origin itself (read-your-writes).
    pub bound_secs: f64,
    /// Lookups of the load (answered), present and absent keys.
    pub lookups: u64,
    /// Of those per second.
    pub lookups_per_sec: f64,
    /// Lookup latency, ms.
    pub lookup_p50_ms: f64,
    /// 99th percentile, ms.
    pub lookup_p99_ms: f64,
    /// Failed lookups of the load.
    pub lookup_errors: Errors,
    /// Answers by `x-bloomgate-answered-by`.
    pub answered_by: BTreeMap<String, u64>,
    /// The writes meanwhile.
    pub writes: WriteFigures,
    /// Keys followed.
    pub probes: u64,
    /// Of those, never "seen" within the bound plus the margin: must be 0.
    pub never_seen: u64,
    /// Lookups the probes made.
    pub probe_polls: u64,
    /// Probe lookups that failed, by kind.
    pub probe_errors: Errors,
    /// Acknowledgement to "seen", ms.
    pub lag_p50_ms: Option<f64>,
    /// 99th percentile, ms.
    pub lag_p99_ms: Option<f64>,
    /// Slowest, ms.
    pub lag_max_ms: Option<f64>,
    /// Present keys answered "not seen" (load: any; probes: asked for later than the bound after
    /// the acknowledgement) and absent keys answered "seen": must be 0.
    pub wrong_answers: u64,
    /// Lookups at the front, load and probes together: the denominator of the per-lookup figures.
    pub front_lookups: u64,
    /// What the edge asked of the origin and got back (None without an edge).
    pub traffic: Option<ProxyTally>,
    /// Requests to the origin per 1,000 front lookups, by kind.
    pub requests_per_1k_lookups: BTreeMap<String, f64>,
    /// Response body bytes from the origin per 1,000 front lookups, by kind.
    pub bytes_per_1k_lookups: BTreeMap<String, f64>,
    /// Response body bytes from the origin per acknowledged write, by kind.
    pub bytes_per_write: BTreeMap<String, f64>,
    /// The origin's own count of manifests, segments and journal chunks served (cross-check).
    pub origin_served: BTreeMap<String, f64>,
    /// CPU by process group, cores busy on average.
    pub cpu_cores: BTreeMap<String, f64>,
    /// Every followed key.
    pub probe_outcomes: Vec<ProbeOutcome>,
}

/// One side in one round.
#[derive(Clone, Debug, Serialize)]
pub struct WriteRun {
    /// `journal` or `no-journal`.
    pub side: String,
    /// The origin's `journal_enabled`.
    pub journal_enabled: bool,
    /// Round, from 1.
    pub round: usize,
    /// Filter written to.
    pub filter: String,
    /// The writes-only phase, if any.
    pub origin_writes: Option<OriginWrites>,
    /// The front run.
    pub front: FrontRun,
    /// The origin's stats of the filter afterwards (journal entries and bytes in Redis).
    pub filter_stats: serde_json::Value,
}

/// The whole A/B.
#[derive(Clone, Debug, Serialize)]
pub struct WritesReport {
    /// Settings, as given.
    pub settings: BTreeMap<String, String>,
    /// One per side and round, in the order run.
    pub runs: Vec<WriteRun>,
}

struct CpuAt {
    groups: Vec<f64>,
    machine: f64,
}

fn cpu_now(groups: &[CpuGroup]) -> CpuAt {
    CpuAt { groups: groups.iter().map(CpuGroup::seconds).collect(), machine: machine_busy_seconds().unwrap_or(0.0) }
}

/// CPU seconds per group between two readings, and everything else on the machine as `zz-others`.
fn cpu_between(groups: &[CpuGroup], before: &CpuAt, after: &CpuAt) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    let mut mine = 0.0;
    for (i, g) in groups.iter().enumerate() {
        let secs = (after.groups[i] - before.groups[i]).max(0.0);
        mine += secs;
        out.insert(g.name.clone(), secs);
    }
    out.insert("zz-others".into(), ((after.machine - before.machine) - mine).max(0.0));
    out
}

fn scaled(m: &BTreeMap<String, f64>, factor: f64) -> BTreeMap<String, f64> {
    m.iter().map(|(k, v)| (k.clone(), v * factor)).collect()
}

/// `d` by kind, each divided by `n`, plus the freshness traffic and the total.
fn per(d: &PerKind, n: f64) -> BTreeMap<String, f64> {
    let n = n.max(1.0);
    [
        ("manifest", d.manifests),
        ("segment", d.segments),
        ("journal", d.journals),
        ("forwarded", d.forwarded()),
        ("other", d.other),
        ("freshness", d.freshness()),
        ("total", d.total()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v as f64 / n))
    .collect()
}

fn step(cfg: &BenchConfig, msg: &str) {
    if cfg.progress {
        eprintln!("[loadgen] {msg}");
    }
}

/// What every side's runs share.
struct Shared<'a> {
    cfg: &'a BenchConfig,
    w: &'a WritesConfig,
    workload: Workload,
    base_groups: Vec<CpuGroup>,
    /// Names this run's written keys. A run that measures reused filters again must write keys
    /// they do not hold yet: re-adding the earlier run's keys sets no bit, bumps no segment and
    /// is "seen" at once, which made a reused journal-off side look free.
    write_salt: String,
}

/// Runs the A/B `w` asks for with `cfg`'s seed, filter settings, services and S.
pub async fn run_writes(cfg: &BenchConfig, w: &WritesConfig) -> anyhow::Result<WritesReport> {
    anyhow::ensure!(w.rate > 0.0 && w.writers > 0, "--write-rate and the writers must be positive");
    let http = reqwest::Client::builder().timeout(Duration::from_secs(60)).build()?;
    let settings = |journal_enabled| OriginSettings {
        redis_url: cfg.redis_url.clone(),
        redis_cluster_nodes: Vec::new(),
        cassandra: cfg.cassandra.clone(),
        keyspace: cfg.keyspace.clone(),
        filter_enabled: true,
        journal_enabled,
        extra_env: Vec::new(),
    };
    step(cfg, "writes A/B: starting an origin with the insert journal and one without");
    let origins =
        [start_origin(&cfg.origin, &settings(true)).await?, start_origin(&cfg.origin, &settings(false)).await?];
    let origin_of = |side: Side| &origins[if side == Side::Journal { 0 } else { 1 }];

    // Capacity for the preload and every write of every round, so no automatic resize (a new
    // generation: every segment refetched) lands in the middle of a measurement.
    let per_round = w.rate * (w.origin_duration + w.warmup + w.duration).as_secs_f64();
    let keys = w.present as f64 + per_round * w.rounds as f64 + 1000.0;
    let capacity = (keys * cfg.capacity_headroom).ceil() as u64;
    let present = Arc::new(present_keys(cfg.seed, w.present));
    let mut filters = Vec::new();
    let preload_started = Instant::now();
    if let Some(reused) = &w.reuse_filters {
        step(cfg, &format!("writes A/B: measuring the filters {reused:?} again (no preload)"));
        for (side, name) in [Side::Journal, Side::NoJournal].into_iter().zip(reused) {
            let stats = format!("{}/v1/filters/{name}/stats", origin_of(side).base);
            let r = http.get(&stats).bearer_auth(bloomgate_tests::origin::TOKEN).send().await?;
            anyhow::ensure!(r.status().is_success(), "--write-filters: {name}: {} {}", r.status(), r.text().await?);
            let stats: serde_json::Value = r.json().await?;
            room_for_writes(name, &stats, per_round * w.rounds as f64)?;
            filters.push(name.clone());
        }
    }
    for side in [Side::Journal, Side::NoJournal].into_iter().filter(|_| w.reuse_filters.is_none()) {
        let name = format!("fresh-{}-{:016x}", side.name(), rand::random::<u64>());
        step(cfg, &format!("writes A/B: preloading {} keys into {name} (capacity {capacity})", w.present));
        let spec = FilterSpec { name: &name, fp_rate: cfg.fp_rate, capacity, segment_bytes: w.segment_bytes };
        // Each through its own side's origin: whether a generation keeps a journal is decided
        // when it is named. The preload's entries are behind every segment the edge fetches.
        preload(&http, &origin_of(side).base, &spec, &present, cfg.progress).await?;
        filters.push(name);
    }
    let preload_secs = preload_started.elapsed().as_secs_f64();
    let filter_of = |side: Side| filters[if side == Side::Journal { 0 } else { 1 }].clone();

    let me = std::process::id();
    let shared = Shared {
        cfg,
        w,
        workload: Workload::new(cfg.seed, present.clone(), cfg.miss_share, cfg.zipf_s),
        write_salt: format!("{:08x}", rand::random::<u32>()),
        base_groups: vec![
            CpuGroup {
                name: "redis".into(),
                pids: pids_matching("redis-server", Some(&format!(":{}", redis_port(&cfg.redis_url)))),
            },
            CpuGroup { name: "cassandra".into(), pids: pids_matching("CassandraDaemon", None) },
            CpuGroup { name: "loadgen".into(), pids: vec![me] },
        ],
    };
    let mut runs = Vec::new();
    for round in 1..=w.rounds.max(1) {
        let order = if round % 2 == 1 { [Side::Journal, Side::NoJournal] } else { [Side::NoJournal, Side::Journal] };
        for side in order {
            let run = run_side(&shared, &http, origin_of(side), &filter_of(side), side, round).await?;
            runs.push(run);
        }
    }
    let mut s = BTreeMap::new();
    for (k, v) in [
        ("write_rate", w.rate.to_string()),
        ("writers", w.writers.to_string()),
        ("present_keys", w.present.to_string()),
        ("capacity", if w.reuse_filters.is_some() { "of the reused filters".into() } else { capacity.to_string() }),
        ("segment_bytes", w.segment_bytes.map_or("origin default (65536)".into(), |b| b.to_string())),
        ("lookup_rate", w.lookup_rate.to_string()),
        ("lookup_connections", w.lookup_connections.to_string()),
        ("duration_secs", w.duration.as_secs_f64().to_string()),
        ("warmup_secs", w.warmup.as_secs_f64().to_string()),
        ("origin_duration_secs", w.origin_duration.as_secs_f64().to_string()),
        ("rounds", w.rounds.to_string()),
        ("write_keys_salt", shared.write_salt.clone()),
        ("reused_filters", w.reuse_filters.as_ref().map_or("no (preloaded)".into(), |f| f.join(","))),
        ("probe_every", w.probe_every.to_string()),
        ("probe_interval_ms", w.probe_interval.as_millis().to_string()),
        ("probe_margin_ms", w.probe_margin.as_millis().to_string()),
        ("edge_freshness_secs", cfg.edge_freshness_secs.map_or("no edge".into(), |s| s.to_string())),
        ("fp_rate", cfg.fp_rate.to_string()),
        ("miss_share", cfg.miss_share.to_string()),
        ("seed", cfg.seed.to_string()),
        (
            "preload",
            match &w.reuse_filters {
                Some(_) => "none: filters of an earlier run, this run's keys salted".into(),
                None => "each filter through its own side's origin (journal on / off)".into(),
            },
        ),
        ("preload_secs", format!("{preload_secs:.1}")),
    ] {
        s.insert(k.to_owned(), v);
    }
    Ok(WritesReport { settings: s, runs })
}

/// A reused filter must take this run's writes without an automatic resize (a new generation,
/// every segment fetched again) landing in the measurement.
fn room_for_writes(name: &str, stats: &serde_json::Value, writes: f64) -> anyhow::Result<()> {
    let capacity = stats["capacity"].as_f64().unwrap_or(0.0);
    let held = stats["estimated_keys"].as_f64().unwrap_or(f64::INFINITY);
    anyhow::ensure!(
        held + writes <= capacity,
        "--write-filters: {name} holds ~{held:.0} keys of its capacity {capacity:.0}; this run writes \
         ~{writes:.0} more, which would resize it mid-measurement: preload new filters instead"
    );
    Ok(())
}

fn redis_port(url: &str) -> String {
    url.trim_end_matches('/').rsplit(':').next().unwrap_or("6379").to_owned()
}

/// One side in one round: the writes-only phase, then the front.
async fn run_side(
    sh: &Shared<'_>,
    http: &reqwest::Client,
    origin: &Server,
    filter: &str,
    side: Side,
    round: usize,
) -> anyhow::Result<WriteRun> {
    let (cfg, w) = (sh.cfg, sh.w);
    let me = std::process::id();
    let mut groups = sh.base_groups.clone();
    if origin.pid != me {
        groups.push(CpuGroup { name: "origin".into(), pids: vec![origin.pid] });
    }
    let write_spec = |phase: &str, duration: Duration, probe: Option<ProbeSpec>| WriteSpec {
        // The same label on both sides: both write the same keys, each into its own filter.
        label: format!("{}/r{round}/{phase}", sh.write_salt),
        seed: cfg.seed,
        origin: origin.base.clone(),
        filter: filter.to_owned(),
        rate: w.rate,
        connections: w.writers,
        duration,
        probe,
    };
    if !cfg.quiet_wait.is_zero() {
        let others = wait_quiet(&groups, cfg.quiet_wait).await;
        step(cfg, &format!("  others on the machine: {others:.2} cores"));
    }

    let origin_writes = if w.origin_duration.is_zero() {
        None
    } else {
        step(cfg, &format!("round {round}, {}: {} writes/s to the origin alone", side.name(), w.rate));
        let r0 = RedisCommands::read(&cfg.redis_url).await;
        let (m0, c0) = (Samples::scrape(http, &origin.base).await?, cpu_now(&groups));
        let stats = write(&write_spec("origin", w.origin_duration, None)).await?;
        let (m1, c1) = (Samples::scrape(http, &origin.base).await?, cpu_now(&groups));
        let r1 = RedisCommands::read(&cfg.redis_url).await;
        let secs = cpu_between(&groups, &c0, &c1);
        let per_write = 1.0 / stats.acked.max(1) as f64;
        let redis = match (r0, r1) {
            (Some(a), Some(b)) => b.since(&a),
            _ => BTreeMap::new(),
        };
        Some(OriginWrites {
            writes: WriteFigures::of(&stats),
            origin_writes_counted: m1.delta(&m0, "bloomgate_writes_total"),
            cpu_us_per_write: scaled(&secs, 1e6 * per_write),
            cpu_cores: scaled(&secs, 1.0 / stats.seconds.max(1e-9)),
            redis_calls_per_write: redis.iter().map(|(k, (c, _))| (k.clone(), *c as f64 * per_write)).collect(),
            redis_usec_per_write: redis.iter().map(|(k, (_, u))| (k.clone(), *u as f64 * per_write)).collect(),
        })
    };

    let known: HashSet<u32> = descendants(me).into_iter().collect();
    let (proxy, edge) = match cfg.edge_freshness_secs {
        Some(s) => {
            step(
                cfg,
                &format!("round {round}, {}: starting wrangler dev (S = {s} s) through a counting proxy", side.name()),
            );
            let proxy = CountingProxy::start(origin.base.trim_start_matches("http://")).await?;
            let edge = Wrangler::start(&format!("http://{}", proxy.addr), EDGE_SECRET, s).await;
            (Some(proxy), Some(edge))
        }
        None => (None, None),
    };
    if edge.is_some() {
        let pids = descendants(me).into_iter().filter(|p| !known.contains(p)).collect();
        groups.push(CpuGroup { name: "edge".into(), pids });
    }
    let front_base = edge.as_ref().map_or(origin.base.clone(), |e| e.base.clone());
    let bound = Duration::from_secs(u64::from(cfg.edge_freshness_secs.unwrap_or(0)));
    let cap = bound + w.probe_margin;
    let lookups = |label: &str, duration: Duration| DriveSpec {
        label: format!("fresh/r{round}/{label}"),
        base: front_base.clone(),
        filter: filter.to_owned(),
        connections: w.lookup_connections,
        duration: Some(duration),
        max_lookups: None,
        rate: (w.lookup_rate > 0.0).then_some(w.lookup_rate),
        progress: false,
    };
    step(
        cfg,
        &format!(
            "round {round}, {}: {} lookups/s at the {} and {} writes/s",
            side.name(),
            w.lookup_rate,
            if edge.is_some() { "edge" } else { "origin" },
            w.rate
        ),
    );
    if !w.warmup.is_zero() {
        let (ls, ws) = (lookups("warmup", w.warmup), write_spec("warmup", w.warmup, None));
        let (l, wr) = tokio::join!(drive(&ls, &sh.workload), write(&ws));
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
    let t0 = (proxy.as_ref().map(|p| p.counts.tally()), Samples::scrape(http, &origin.base).await?, cpu_now(&groups));
    let started = Instant::now();
    let ls = DriveSpec { progress: cfg.progress, ..lookups("measured", w.duration) };
    let ws = write_spec("front", w.duration, Some(probe));
    let (l, wr) = tokio::join!(drive(&ls, &sh.workload), write(&ws));
    let (looked, wrote) = (l?, wr?);
    let seconds = started.elapsed().as_secs_f64();
    let t1 = (proxy.as_ref().map(|p| p.counts.tally()), Samples::scrape(http, &origin.base).await?, cpu_now(&groups));
    drop(edge);
    drop(proxy);

    let probe_polls: u64 = wrote.probes.iter().map(|p| p.polls).sum();
    let front_lookups = looked.lookups + probe_polls;
    let traffic = match (t0.0, t1.0) {
        (Some(a), Some(b)) => Some(b.since(&a)),
        _ => None,
    };
    let thousand = front_lookups as f64 / 1000.0;
    let mut origin_served = BTreeMap::new();
    for kind in ["manifest", "segment", "journal"] {
        let sample = format!("bloomgate_edge_requests_total{{kind=\"{kind}\"}}");
        origin_served.insert(kind.to_owned(), t1.1.delta(&t0.1, &sample));
    }
    let front = FrontRun {
        front: match cfg.edge_freshness_secs {
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
        cpu_cores: scaled(&cpu_between(&groups, &t0.2, &t1.2), 1.0 / seconds.max(1e-9)),
        probe_outcomes: wrote.probes,
    };
    Ok(WriteRun {
        side: side.name().into(),
        journal_enabled: side == Side::Journal,
        round,
        filter: filter.to_owned(),
        origin_writes,
        front,
        filter_stats: filter_stats(http, &origin.base, filter).await,
    })
}

/// The median of the values present (none if there are none).
pub fn median(mut v: Vec<f64>) -> Option<f64> {
    v.retain(|x| x.is_finite());
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    Some(if v.len() % 2 == 1 { v[mid] } else { (v[mid - 1] + v[mid]) / 2.0 })
}

fn fmt(v: Option<f64>, digits: usize) -> String {
    v.map_or("–".into(), |v| format!("{v:.digits$}"))
}

/// A row of the side-by-side table: what it shows and how to read it from a run.
type Row = (&'static str, usize, fn(&WriteRun) -> Option<f64>);

fn get(m: &BTreeMap<String, f64>, k: &str) -> Option<f64> {
    m.get(k).copied()
}

fn redis_per_write(r: &WriteRun, command: &str, usec: bool) -> Option<f64> {
    let o = r.origin_writes.as_ref()?;
    let m = if usec { &o.redis_usec_per_write } else { &o.redis_calls_per_write };
    // Ran in the phase but not this command: zero, not unknown.
    (!m.is_empty()).then(|| get(m, command).unwrap_or(0.0))
}

fn origin_cpu(r: &WriteRun, group: &str) -> Option<f64> {
    r.origin_writes.as_ref().and_then(|o| get(&o.cpu_us_per_write, group))
}

const ROWS: &[Row] = &[
    ("writes acknowledged/s, writes only", 1, |r| r.origin_writes.as_ref().map(|o| o.writes.writes_per_sec)),
    ("write latency p50, ms, writes only", 2, |r| r.origin_writes.as_ref().map(|o| o.writes.p50_ms)),
    ("write latency p99, ms, writes only", 2, |r| r.origin_writes.as_ref().map(|o| o.writes.p99_ms)),
    ("origin CPU per write, µs, writes only", 0, |r| origin_cpu(r, "origin")),
    ("Redis CPU per write, µs, writes only", 0, |r| origin_cpu(r, "redis")),
    ("Cassandra CPU per write, µs, writes only", 0, |r| origin_cpu(r, "cassandra")),
    ("Redis commands per write (script-run included), writes only", 2, |r| {
        r.origin_writes.as_ref().map(|o| o.redis_calls_per_write.values().sum())
    }),
    ("Redis scripts (EVALSHA) per write, writes only", 2, |r| redis_per_write(r, "evalsha", false)),
    ("Redis XADD per write, writes only", 2, |r| redis_per_write(r, "xadd", false)),
    ("Redis time in scripts per write, µs, writes only", 1, |r| redis_per_write(r, "evalsha", true)),
    ("loadgen CPU per write, µs, writes only", 0, |r| origin_cpu(r, "loadgen")),
    ("writes acknowledged/s, with lookups", 1, |r| Some(r.front.writes.writes_per_sec)),
    ("write latency p50, ms, with lookups", 2, |r| Some(r.front.writes.p50_ms)),
    ("write latency p99, ms, with lookups", 2, |r| Some(r.front.writes.p99_ms)),
    ("lookups/s (load)", 1, |r| Some(r.front.lookups_per_sec)),
    ("lookup latency p50, ms", 2, |r| Some(r.front.lookup_p50_ms)),
    ("lookup latency p99, ms", 2, |r| Some(r.front.lookup_p99_ms)),
    ("freshness lag p50, ms", 0, |r| r.front.lag_p50_ms),
    ("freshness lag p99, ms", 0, |r| r.front.lag_p99_ms),
    ("freshness lag max, ms", 0, |r| r.front.lag_max_ms),
    ("keys followed", 0, |r| Some(r.front.probes as f64)),
    ("never seen within S + margin", 0, |r| Some(r.front.never_seen as f64)),
    ("manifests per 1,000 lookups", 2, |r| get(&r.front.requests_per_1k_lookups, "manifest")),
    ("segments per 1,000 lookups", 2, |r| get(&r.front.requests_per_1k_lookups, "segment")),
    ("journal chunks per 1,000 lookups", 2, |r| get(&r.front.requests_per_1k_lookups, "journal")),
    ("forwarded lookups per 1,000 lookups", 1, |r| get(&r.front.requests_per_1k_lookups, "forwarded")),
    ("KB origin→edge per 1,000 lookups: manifests", 1, |r| kb(get(&r.front.bytes_per_1k_lookups, "manifest"))),
    ("KB per 1,000 lookups: segments", 1, |r| kb(get(&r.front.bytes_per_1k_lookups, "segment"))),
    ("KB per 1,000 lookups: journal", 1, |r| kb(get(&r.front.bytes_per_1k_lookups, "journal"))),
    ("KB per 1,000 lookups: forwarded lookups", 1, |r| kb(get(&r.front.bytes_per_1k_lookups, "forwarded"))),
    ("KB per 1,000 lookups: all", 1, |r| kb(get(&r.front.bytes_per_1k_lookups, "total"))),
    ("bytes per write: manifests", 0, |r| get(&r.front.bytes_per_write, "manifest")),
    ("bytes per write: segments", 0, |r| get(&r.front.bytes_per_write, "segment")),
    ("bytes per write: journal", 0, |r| get(&r.front.bytes_per_write, "journal")),
    ("bytes per write: freshness (manifests + segments + journal)", 0, |r| get(&r.front.bytes_per_write, "freshness")),
    ("bytes per write: all (forwarded lookups too)", 0, |r| get(&r.front.bytes_per_write, "total")),
    ("CPU cores: edge", 2, |r| get(&r.front.cpu_cores, "edge")),
    ("CPU cores: origin", 2, |r| get(&r.front.cpu_cores, "origin")),
    ("CPU cores: redis", 2, |r| get(&r.front.cpu_cores, "redis")),
    ("CPU cores: cassandra", 2, |r| get(&r.front.cpu_cores, "cassandra")),
    ("CPU cores: loadgen", 2, |r| get(&r.front.cpu_cores, "loadgen")),
    ("CPU cores: others on the machine", 2, |r| get(&r.front.cpu_cores, "zz-others")),
    ("journal entries in Redis after the run", 0, |r| r.filter_stats["journal_entries"].as_f64()),
    ("journal bytes in Redis after the run", 0, |r| r.filter_stats["journal_bytes"].as_f64()),
    ("errors: lookups, writes, probes", 0, |r| Some(errors(r) as f64)),
    ("wrong answers", 0, |r| Some(r.front.wrong_answers as f64)),
];

/// Failed lookups, writes (both phases) and probe lookups of a run.
fn errors(r: &WriteRun) -> u64 {
    let f = &r.front;
    let writes_only = r.origin_writes.as_ref().map_or(0, |o| o.writes.errors.total());
    f.lookup_errors.total() + f.writes.errors.total() + f.probe_errors.total() + writes_only
}

fn kb(v: Option<f64>) -> Option<f64> {
    v.map(|b| b / 1000.0)
}

impl WritesReport {
    /// The runs of one side.
    fn side(&self, journal: bool) -> impl Iterator<Item = &WriteRun> {
        self.runs.iter().filter(move |r| r.journal_enabled == journal)
    }

    /// A figure's median over one side's rounds.
    pub fn median(&self, journal: bool, f: fn(&WriteRun) -> Option<f64>) -> Option<f64> {
        median(self.side(journal).filter_map(f).collect())
    }

    /// Median bytes per write that kept the edge fresh, journal on and off.
    pub fn freshness_bytes_per_write(&self, journal: bool) -> Option<f64> {
        self.median(journal, |r| get(&r.front.bytes_per_write, "freshness"))
    }

    /// The side-by-side table (medians over rounds) and one line per run, in Markdown.
    pub fn markdown(&self) -> String {
        let mut out = String::new();
        let rounds = self.side(true).count();
        let front = self.runs.first().map_or("", |r| r.front.front.as_str());
        let _ = writeln!(
            out,
            "\nWrites A/B ({front}; {} writes/s; medians over {rounds} round(s)):\n",
            self.settings.get("write_rate").map_or("?", String::as_str)
        );
        let _ = writeln!(out, "| | journal on | journal off | on ÷ off |");
        let _ = writeln!(out, "|---|---:|---:|---:|");
        for (label, digits, f) in ROWS {
            let (on, off) = (self.median(true, *f), self.median(false, *f));
            if on.is_none() && off.is_none() {
                continue;
            }
            let ratio = match (on, off) {
                (Some(a), Some(b)) if b != 0.0 => format!("{:.2}", a / b),
                _ => "–".into(),
            };
            let _ = writeln!(out, "| {label} | {} | {} | {ratio} |", fmt(on, *digits), fmt(off, *digits));
        }
        let _ = writeln!(
            out,
            "\n| round | side | writes/s | origin µs/write | write p50 ms | lookups/s | lookup p50 / p99 ms | lag p50 / p99 / max ms | never seen | segments | journal chunks | bytes/write (freshness) | others, cores | errors | wrong |"
        );
        let _ = writeln!(out, "|---|---|---:|---:|---:|---:|---|---|---:|---:|---:|---:|---:|---:|---:|");
        for r in &self.runs {
            let f = &r.front;
            let _ = writeln!(
                out,
                "| {} | {} | {:.1} | {} | {} | {:.1} | {:.0} / {:.0} | {} / {} / {} | {} | {} | {} | {} | {} | {} | {} |",
                r.round,
                r.side,
                f.writes.writes_per_sec,
                fmt(origin_cpu(r, "origin"), 0),
                fmt(r.origin_writes.as_ref().map(|o| o.writes.p50_ms), 2),
                f.lookups_per_sec,
                f.lookup_p50_ms,
                f.lookup_p99_ms,
                fmt(f.lag_p50_ms, 0),
                fmt(f.lag_p99_ms, 0),
                fmt(f.lag_max_ms, 0),
                f.never_seen,
                f.traffic.map_or("–".into(), |t| t.requests.segments.to_string()),
                f.traffic.map_or("–".into(), |t| t.requests.journals.to_string()),
                fmt(get(&f.bytes_per_write, "freshness"), 0),
                fmt(get(&f.cpu_cores, "zz-others"), 2),
                errors(r),
                f.wrong_answers,
            );
        }
        out
    }
}

/// What issue 10 promises, as checks: every written key seen within S (+ the probe's margin),
/// no wrong answers, no errors.
pub fn checks(w: &WritesReport) -> Vec<Check> {
    let never: u64 = w.runs.iter().map(|r| r.front.never_seen).sum();
    let probes: u64 = w.runs.iter().map(|r| r.front.probes).sum();
    let wrong: u64 = w.runs.iter().map(|r| r.front.wrong_answers).sum();
    let errors: u64 = w.runs.iter().map(errors).sum();
    let lag_max = w.runs.iter().filter_map(|r| r.front.lag_max_ms).fold(0.0, f64::max);
    let bound = w.runs.first().map_or(0.0, |r| r.front.bound_secs);
    let mut out = vec![Check {
        target: format!(
            "writes: every followed key \"seen\" at the front within S = {bound} s (+ margin), no wrong answers"
        ),
        measured: format!("{never} of {probes} never seen, slowest {lag_max:.0} ms; {wrong} wrong answers"),
        met: never == 0 && wrong == 0 && probes > 0,
    }];
    out.push(Check {
        target: "writes A/B: no errors (lookups, writes, probes)".into(),
        measured: format!("{errors} errors"),
        met: errors == 0,
    });
    if let (Some(on), Some(off)) = (w.freshness_bytes_per_write(true), w.freshness_bytes_per_write(false)) {
        out.push(Check {
            target: "bytes per write to keep the edge fresh, journal on vs off (issue 10: in proportion to writes)"
                .into(),
            measured: format!("{on:.0} vs {off:.0} bytes per write ({:.3} ×)", on / off.max(1e-9)),
            met: on < off,
        });
    }
    out
}
