//! One bench run, side by side: the hello-world floor, the origin without its filter
//! (baseline), the origin with the Redis filter (the mix, negatives only, and negatives at half
//! their maximum rate), and the edge under `wrangler dev` in front of that origin; then the
//! miss-share × fp_rate sweep, and the writes A/B of [`super::freshness`]. Every target sees the
//! same seeded workload.

use super::driver::{drive, DriveSpec, DriveStats};
use super::freshness::{self, run_writes, WritesConfig};
use super::probe::{descendants, machine_busy_seconds, pids_matching, wait_quiet, CassandraReads, CpuGroup, Samples};
use super::proxy::{CountingProxy, ProxyTally};
use super::report::{BenchReport, Check, Machine, SweepPoint, TargetResult};
use super::servers::{start_floor, start_origin, Launch, OriginSettings, Server};
use super::workload::{present_keys, Workload};
use bloomgate_tests::edge::Wrangler;
use bloomgate_tests::origin::{EDGE_SECRET, TOKEN};
use indicatif::{ProgressBar, ProgressStyle};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The sweep of miss share × fp_rate against theory.
#[derive(Clone, Debug)]
pub struct SweepConfig {
    /// Present keys of each sweep filter (one filter per fp_rate).
    pub present: usize,
    /// Filters' false-positive rates.
    pub fp_rates: Vec<f64>,
    /// Miss shares.
    pub miss_shares: Vec<f64>,
    /// Lookups per point.
    pub lookups: u64,
    /// Segment size of the sweep filters: small segments size a small filter close to its
    /// fp_rate (a filter is whole segments, so a 64 KiB default would over-size it).
    pub segment_bytes: Option<u64>,
}

/// Everything a run needs.
#[derive(Clone, Debug)]
pub struct BenchConfig {
    /// Seeds keys and streams.
    pub seed: u64,
    /// Present keys preloaded into the main filter (its capacity too).
    pub present: usize,
    /// The main filter's false-positive rate.
    pub fp_rate: f64,
    /// Filters are created for `keys × capacity_headroom` (≥ 1).
    pub capacity_headroom: f64,
    /// Segment size of the main filter (`None` = the origin's default, 64 KiB). A filter is
    /// whole segments, so at 10⁵ keys 64 KiB segments over-size it (lower FPR than asked).
    pub segment_bytes: Option<u64>,
    /// Share of lookups for absent keys in the mixed runs.
    pub miss_share: f64,
    /// Zipf exponent of the hits.
    pub zipf_s: f64,
    /// Connections per run.
    pub connections: usize,
    /// Length of each measured run.
    pub duration: Duration,
    /// Unmeasured run before each measured one (connections, caches, JIT, edge segments).
    pub warmup: Duration,
    /// Also run the negatives at half of their measured maximum rate (p99 target).
    pub half_rate: bool,
    /// Run the edge with this freshness bound S (seconds); `None` = no edge.
    pub edge_freshness_secs: Option<u32>,
    /// How the origins run.
    pub origin: Launch,
    /// How the floor runs.
    pub floor: Launch,
    /// `redis://host:port/`.
    pub redis_url: String,
    /// Cassandra `host:port`.
    pub cassandra: String,
    /// Keyspace.
    pub keyspace: String,
    /// The sweep, if any.
    pub sweep: Option<SweepConfig>,
    /// Connections for the edge (wrangler dev), `None` = `connections`.
    pub edge_connections: Option<usize>,
    /// Length of the edge's measured run, `None` = `duration` (wrangler dev is slow: a longer
    /// run gives a steadier hit share, and so a steadier origin-requests figure).
    pub edge_duration: Option<Duration>,
    /// Before each measured run, wait up to this long for the rest of the machine to go quiet
    /// (other processes using under half a core over one second).
    pub quiet_wait: Duration,
    /// Progress bars and step lines on stderr.
    pub progress: bool,
    /// Measure the side-by-side targets of issue 6 (floor, baseline, filter, edge) and the
    /// sweep (if asked); `false` = only the writes A/B.
    pub side_by_side: bool,
    /// The writes A/B of issue 10 (edge freshness and bytes per write, journal on and off).
    pub writes: Option<WritesConfig>,
    /// How this run was started, for the report.
    pub command: String,
}

struct Env {
    http: reqwest::Client,
    cassandra: Option<CassandraReads>,
    groups: Vec<CpuGroup>,
    progress: bool,
}

/// What is read before and after a measured run.
struct Snapshot {
    origin: Option<Samples>,
    coordinator_reads: Option<u64>,
    proxy: Option<ProxyTally>,
    cpu: Vec<f64>,
    machine: f64,
}

/// One target to measure.
struct Target<'a> {
    name: &'a str,
    description: String,
    base: String,
    /// The origin whose counters this run moves.
    origin: Option<&'a Server>,
    proxy: Option<&'a CountingProxy>,
    miss_share: f64,
    rate: Option<f64>,
    /// Connections, when not the configured default.
    connections: Option<usize>,
    /// Measured length, when not the configured default.
    duration: Option<Duration>,
    /// Whether a filter stands before Cassandra (false for the floor and the baseline).
    filtered: bool,
}

impl<'a> Target<'a> {
    /// A closed-loop run at `base` (no origin counters, no proxy) at the configured
    /// connections and length.
    fn new(name: &'a str, description: impl Into<String>, base: &str, miss_share: f64) -> Target<'a> {
        Target {
            name,
            description: description.into(),
            base: base.to_owned(),
            origin: None,
            proxy: None,
            miss_share,
            rate: None,
            connections: None,
            duration: None,
            filtered: false,
        }
    }

    /// A run against `origin`, whose counters it reads; `filtered` when its filter is on.
    fn at_origin(name: &'a str, description: &str, origin: &'a Server, miss_share: f64, filtered: bool) -> Target<'a> {
        Target { origin: Some(origin), filtered, ..Target::new(name, description, &origin.base, miss_share) }
    }

    /// The same run at a fixed rate.
    fn at_rate(self, rate: f64) -> Target<'a> {
        Target { rate: Some(rate), ..self }
    }
}

fn step(env: &Env, msg: &str) {
    if env.progress {
        eprintln!("[loadgen] {msg}");
    }
}

impl Env {
    async fn snapshot(&self, t: &Target<'_>) -> anyhow::Result<Snapshot> {
        let origin = match t.origin {
            Some(o) => Some(Samples::scrape(&self.http, &o.base).await?),
            None => None,
        };
        let coordinator_reads = match &self.cassandra {
            Some(c) => c.count().await,
            None => None,
        };
        Ok(Snapshot {
            origin,
            coordinator_reads,
            proxy: t.proxy.map(|p| p.counts.tally()),
            cpu: self.groups.iter().map(CpuGroup::seconds).collect(),
            machine: machine_busy_seconds().unwrap_or(0.0),
        })
    }

    /// Waits up to `max` for others to use under half a core; the last reading.
    async fn wait_quiet(&self, max: Duration) -> f64 {
        wait_quiet(&self.groups, max).await
    }
}

/// A filter to create.
#[derive(Clone, Debug)]
pub struct FilterSpec<'a> {
    /// Its name.
    pub name: &'a str,
    /// Target false-positive rate at capacity.
    pub fp_rate: f64,
    /// Keys it is sized for.
    pub capacity: u64,
    /// Segment size; `None` = the origin's default.
    pub segment_bytes: Option<u64>,
}

/// Creates the filter and stores `keys` through the origin's batch API, four batches at a time.
pub async fn preload(
    http: &reqwest::Client,
    base: &str,
    spec: &FilterSpec<'_>,
    keys: &Arc<Vec<String>>,
    progress: bool,
) -> anyhow::Result<()> {
    let filter = spec.name;
    let client = bloomgate_client::Client::with_http(base, http.clone()).with_token(TOKEN);
    let mut create = bloomgate_client::api::CreateFilter::new(spec.capacity.max(1), spec.fp_rate);
    if let Some(b) = spec.segment_bytes {
        create.segment_bytes = b;
    }
    client.create_filter(filter, &create).await.map_err(|e| anyhow::anyhow!("create filter {filter}: {e}"))?;
    let bar = if progress {
        let bar = ProgressBar::new(keys.len() as u64);
        bar.set_style(
            ProgressStyle::with_template("{prefix:>28} [{bar:30}] {pos}/{len} keys {per_sec}")
                .expect("template")
                .progress_chars("=> "),
        );
        bar.set_prefix(format!("preload {filter}"));
        bar
    } else {
        ProgressBar::hidden()
    };
    let mut tasks = tokio::task::JoinSet::new();
    let chunks = keys.len().div_ceil(1000);
    for c in 0..chunks {
        if tasks.len() >= 4 {
            tasks.join_next().await.expect("a task")??;
        }
        let (client, keys, bar, filter) = (client.clone(), keys.clone(), bar.clone(), filter.to_owned());
        tasks.spawn(async move {
            let chunk = &keys[c * 1000..((c + 1) * 1000).min(keys.len())];
            // Writes are refused with 503 while Redis or Cassandra hiccup (a filter-state read
            // timing out behind other batches' Redis scripts, see BENCHMARKS.md): back off and
            // retry, at least as long as the origin asks.
            for attempt in 0u32.. {
                match client.insert_batch(&filter, chunk).await {
                    Ok(_) => break,
                    Err(e) if attempt < 30 && e.is_retryable() => {
                        let backoff = Duration::from_millis(200 * u64::from((attempt + 1).min(10)));
                        tokio::time::sleep(e.retry_after().unwrap_or_default().max(backoff)).await;
                    }
                    Err(e) => return Err(anyhow::anyhow!("insert batch: {e}")),
                }
            }
            bar.inc(chunk.len() as u64);
            anyhow::Ok(())
        });
    }
    while let Some(r) = tasks.join_next().await {
        r??;
    }
    bar.finish();
    Ok(())
}

/// The origin's stats of a filter (null when it cannot be read).
pub(super) async fn filter_stats(http: &reqwest::Client, base: &str, filter: &str) -> serde_json::Value {
    let client = bloomgate_client::Client::with_http(base, http.clone()).with_token(TOKEN);
    match client.stats(filter).await {
        Ok(stats) => serde_json::to_value(stats).unwrap_or_default(),
        Err(_) => serde_json::Value::Null,
    }
}

fn fp_from_origin(before: &Samples, after: &Samples, filter: &str) -> Option<f64> {
    let neg = after.delta(before, &format!("bloomgate_filter_negatives_total{{filter=\"{filter}\"}}"));
    let fp = after.delta(before, &format!("bloomgate_false_positives_total{{filter=\"{filter}\"}}"));
    (neg + fp > 0.0).then(|| fp / (neg + fp))
}

async fn measure(
    env: &Env,
    cfg: &BenchConfig,
    workload: &Workload,
    filter: &str,
    t: Target<'_>,
) -> anyhow::Result<(TargetResult, DriveStats)> {
    step(env, &format!("{}: {}", t.name, t.description));
    let spec = DriveSpec {
        label: format!("{}/warmup", t.name),
        base: t.base.clone(),
        filter: filter.to_owned(),
        connections: t.connections.unwrap_or(cfg.connections),
        duration: Some(cfg.warmup),
        max_lookups: None,
        rate: t.rate,
        progress: false,
    };
    let workload = Workload {
        seed: workload.seed,
        present: workload.present.clone(),
        miss_share: t.miss_share,
        zipf: workload.zipf.clone(),
    };
    if !cfg.quiet_wait.is_zero() {
        let others = env.wait_quiet(cfg.quiet_wait).await;
        step(env, &format!("  others on the machine: {others:.2} cores"));
    }
    if !cfg.warmup.is_zero() {
        drive(&spec, &workload).await?;
    }
    let before = env.snapshot(&t).await?;
    let spec = DriveSpec {
        label: t.name.to_owned(),
        duration: Some(t.duration.unwrap_or(cfg.duration)),
        progress: env.progress,
        ..spec
    };
    let stats = drive(&spec, &workload).await?;
    let after = env.snapshot(&t).await?;
    let n = stats.lookups.max(1) as f64;
    let mut result = TargetResult {
        name: t.name.to_owned(),
        description: t.description,
        miss_share: t.miss_share,
        connections: spec.connections,
        fixed_rate: t.rate,
        lookups: stats.lookups,
        hits: stats.hits,
        misses: stats.misses,
        seconds: stats.seconds,
        lookups_per_sec: stats.rate(),
        p50_ms: stats.quantile_ms(0.5),
        p99_ms: stats.quantile_ms(0.99),
        p999_ms: stats.quantile_ms(0.999),
        max_ms: stats.latency_us.max() as f64 / 1000.0,
        max_ms_by_second: stats.max_us_by_second.iter().map(|us| *us as f64 / 1000.0).collect(),
        errors: stats.errors.clone(),
        error_total: stats.errors.total(),
        wrong_answers: stats.wrong_answers,
        answered_by: stats.answered_by.clone(),
        cassandra_reads_per_lookup: None,
        cassandra_coordinator_reads_per_lookup: None,
        origin_requests_per_lookup: None,
        origin_requests: None,
        edge_no_forwarded: None,
        fp_observed: None,
        fp_observed_origin: None,
        fallthroughs: BTreeMap::new(),
        cpu_ms_per_1k_lookups: BTreeMap::new(),
        cpu_cores: BTreeMap::new(),
    };
    if let (Some(b), Some(a)) = (&before.origin, &after.origin) {
        result.cassandra_reads_per_lookup = Some(a.delta(b, "bloomgate_database_reads_total") / n);
        result.fp_observed_origin = fp_from_origin(b, a, filter);
        for reason in ["timeout", "error", "meta_missing", "segment_missing", "disabled"] {
            let d = a.delta(b, &format!("bloomgate_filter_fallthroughs_total{{reason=\"{reason}\"}}"));
            if d > 0.0 {
                result.fallthroughs.insert(reason.into(), d);
            }
        }
        if let (Some(cb), Some(ca)) = (before.coordinator_reads, after.coordinator_reads) {
            result.cassandra_coordinator_reads_per_lookup = Some(ca.saturating_sub(cb) as f64 / n);
        }
    }
    if let (Some(b), Some(a)) = (before.proxy, after.proxy) {
        let d = a.since(&b);
        result.origin_requests_per_lookup = Some(d.requests.total() as f64 / n);
        result.origin_requests = Some(d);
        let not_by_edge = stats.lookups - stats.answered_by.get("edge").copied().unwrap_or(0);
        result.edge_no_forwarded = Some(d.requests.lookups as i64 - not_by_edge as i64);
    }
    if stats.misses > 0 && t.filtered {
        let first_no = if t.proxy.is_some() { "edge" } else { "filter" };
        let stopped = stats.misses_answered_by.get(first_no).copied().unwrap_or(0);
        result.fp_observed = Some((stats.misses - stopped) as f64 / stats.misses as f64);
    }
    let mut mine = 0.0;
    for (i, g) in env.groups.iter().enumerate() {
        let secs = (after.cpu[i] - before.cpu[i]).max(0.0);
        mine += secs;
        result.cpu_ms_per_1k_lookups.insert(g.name.clone(), secs * 1000.0 / n * 1000.0);
        result.cpu_cores.insert(g.name.clone(), secs / stats.seconds.max(1e-9));
    }
    // Everything else on the machine: other people's builds and tests share these cores.
    let others = ((after.machine - before.machine) - mine).max(0.0);
    result.cpu_cores.insert("zz-others".into(), others / stats.seconds.max(1e-9));
    Ok((result, stats))
}

fn redis_port(url: &str) -> String {
    url.trim_end_matches('/').rsplit(':').next().unwrap_or("6379").to_owned()
}

/// Runs everything `cfg` asks for and returns the report.
pub async fn run_bench(cfg: &BenchConfig) -> anyhow::Result<BenchReport> {
    let started = Instant::now();
    let mut report = if cfg.side_by_side {
        run_side_by_side(cfg).await?
    } else {
        let mut settings = BTreeMap::new();
        settings.insert("seed".to_owned(), cfg.seed.to_string());
        settings.insert("targets".to_owned(), "writes A/B only".to_owned());
        BenchReport {
            command: cfg.command.clone(),
            machine: Machine::describe(),
            settings,
            targets: Vec::new(),
            sweep: Vec::new(),
            sweep_error: None,
            checks: Vec::new(),
            filter_stats: BTreeMap::new(),
            writes: None,
            writes_error: None,
            wall_seconds: 0.0,
        }
    };
    if let Some(w) = &cfg.writes {
        match run_writes(cfg, w).await {
            Ok(writes) => {
                report.checks.extend(freshness::checks(&writes));
                report.writes = Some(writes);
            }
            // Alone, its failure is the run's; after the side-by-side run, it must not lose it.
            Err(e) if !cfg.side_by_side => return Err(e),
            Err(e) => {
                eprintln!("[loadgen] writes A/B failed: {e:#}");
                report.writes_error = Some(format!("{e:#}"));
            }
        }
    }
    report.wall_seconds = started.elapsed().as_secs_f64();
    Ok(report)
}

/// Issue 6's targets side by side, and the sweep.
/// The servers of a side-by-side run.
struct Servers {
    origin: Server,
    baseline: Server,
    floor: Server,
}

/// Starts the origins (filter on, filter off) and the floor, and the CPU groups to measure.
async fn start_servers(cfg: &BenchConfig, env: &mut Env) -> anyhow::Result<Servers> {
    let settings_for = |filter_enabled| OriginSettings {
        redis_url: cfg.redis_url.clone(),
        redis_cluster_nodes: Vec::new(),
        cassandra: cfg.cassandra.clone(),
        keyspace: cfg.keyspace.clone(),
        filter_enabled,
        journal_enabled: true,
        extra_env: Vec::new(),
    };
    step(env, "starting the origins (filter on, filter off) and the floor");
    let origin = start_origin(&cfg.origin, &settings_for(true)).await?;
    let baseline = start_origin(&cfg.origin, &settings_for(false)).await?;
    let floor = start_floor(&cfg.floor).await?;
    env.cassandra = CassandraReads::connect(&cfg.cassandra, &cfg.keyspace).await;
    let me = std::process::id();
    // In-process servers share this process: their CPU shows under `loadgen` then.
    let mut groups = vec![
        CpuGroup { name: "origin".into(), pids: if origin.pid == me { vec![] } else { vec![origin.pid] } },
        CpuGroup {
            name: "redis".into(),
            pids: pids_matching("redis-server", Some(&format!(":{}", redis_port(&cfg.redis_url)))),
        },
        CpuGroup { name: "cassandra".into(), pids: pids_matching("CassandraDaemon", None) },
        CpuGroup { name: "loadgen".into(), pids: vec![me] },
    ];
    if baseline.pid != me {
        groups.insert(1, CpuGroup { name: "origin-baseline".into(), pids: vec![baseline.pid] });
    }
    if floor.pid != me {
        groups.push(CpuGroup { name: "floor".into(), pids: vec![floor.pid] });
    }
    env.groups = groups;
    Ok(Servers { origin, baseline, floor })
}

/// The floor, the baseline and the filtered origin, each closed loop (and the floor and the
/// negative path again at half their rate, the p99 target's control).
async fn measure_origins(
    env: &Env,
    cfg: &BenchConfig,
    workload: &Workload,
    filter: &str,
    servers: &Servers,
) -> anyhow::Result<Vec<TargetResult>> {
    let Servers { origin, baseline, floor } = servers;
    let mut results = Vec::new();
    let floor_target = Target::new(
        "floor",
        "axum hello-world: same route, a 404 and no work (the framework's cost)",
        &floor.base,
        1.0,
    );
    let (r, _) = measure(env, cfg, workload, filter, floor_target).await?;
    let floor_rate = r.lookups_per_sec;
    results.push(r);
    if cfg.half_rate && floor_rate > 0.0 {
        // The control for the p99 target: what this machine's scheduling alone does to the
        // tail of a server at half its rate.
        let half = Target::new("floor-half", "the floor at half its measured maximum rate", &floor.base, 1.0);
        results.push(measure(env, cfg, workload, filter, half.at_rate(floor_rate / 2.0)).await?.0);
    }
    let describe = "origin, filter disabled: every lookup reads Cassandra";
    let baseline_target = Target::at_origin("baseline", describe, baseline, cfg.miss_share, false);
    results.push(measure(env, cfg, workload, filter, baseline_target).await?.0);
    let filtered = Target::at_origin("filter", "origin with the Redis filter", origin, cfg.miss_share, true);
    results.push(measure(env, cfg, workload, filter, filtered).await?.0);
    let describe = "origin with the Redis filter, absent keys only (the negative path)";
    let (negatives, _) =
        measure(env, cfg, workload, filter, Target::at_origin("filter-negatives", describe, origin, 1.0, true)).await?;
    let max_negative_rate = negatives.lookups_per_sec;
    results.push(negatives);
    if cfg.half_rate && max_negative_rate > 0.0 {
        let describe = "the negative path at half its measured maximum rate";
        let half = Target::at_origin("filter-negatives-half", describe, origin, 1.0, true);
        results.push(measure(env, cfg, workload, filter, half.at_rate(max_negative_rate / 2.0)).await?.0);
    }
    Ok(results)
}

/// `wrangler dev` in front of the filtered origin, through a counting proxy, warm.
async fn measure_edge(
    env: &mut Env,
    cfg: &BenchConfig,
    workload: &Workload,
    filter: &str,
    servers: &Servers,
    freshness: u32,
) -> anyhow::Result<TargetResult> {
    let Servers { origin, baseline, floor } = servers;
    step(env, "starting wrangler dev in front of the origin (through a counting proxy)");
    let proxy = CountingProxy::start(origin.base.trim_start_matches("http://")).await?;
    let edge = Wrangler::start(&format!("http://{}", proxy.addr), EDGE_SECRET, freshness).await;
    let me = std::process::id();
    env.groups.push(CpuGroup {
        name: "edge".into(),
        pids: descendants(me).into_iter().filter(|p| ![origin.pid, baseline.pid, floor.pid].contains(p)).collect(),
    });
    let describe = format!("wrangler dev (workerd) in front of the filtered origin, warm, S = {freshness} s");
    let target = Target {
        proxy: Some(&proxy),
        connections: cfg.edge_connections,
        duration: cfg.edge_duration,
        ..Target::at_origin("edge", &describe, origin, cfg.miss_share, true)
    };
    let target = Target { base: edge.base.clone(), ..target };
    let (r, _) = measure(env, cfg, workload, filter, target).await?;
    env.groups.pop();
    drop(edge);
    Ok(r)
}

/// The run's settings, as reported.
fn side_by_side_settings(cfg: &BenchConfig, filter: &str, preload_secs: f64) -> BTreeMap<String, String> {
    let mut settings = BTreeMap::new();
    for (k, v) in [
        ("seed", cfg.seed.to_string()),
        ("present_keys", cfg.present.to_string()),
        ("fp_rate", cfg.fp_rate.to_string()),
        ("capacity_headroom", cfg.capacity_headroom.to_string()),
        ("segment_bytes", cfg.segment_bytes.map_or("origin default".into(), |b| b.to_string())),
        ("miss_share", cfg.miss_share.to_string()),
        ("zipf_s", cfg.zipf_s.to_string()),
        ("connections", cfg.connections.to_string()),
        ("duration_secs", cfg.duration.as_secs_f64().to_string()),
        ("warmup_secs", cfg.warmup.as_secs_f64().to_string()),
        ("origin", format!("{:?}", cfg.origin)),
        ("floor", format!("{:?}", cfg.floor)),
        ("keyspace", cfg.keyspace.clone()),
        ("filter", filter.to_owned()),
        ("preload_secs", format!("{preload_secs:.1}")),
        ("edge_freshness_secs", cfg.edge_freshness_secs.map_or("off".into(), |s| s.to_string())),
        (
            "sweep",
            cfg.sweep.as_ref().map_or("off".into(), |s| {
                format!(
                    "{} keys per filter, fp {:?}, miss {:?}, {} lookups per point",
                    s.present, s.fp_rates, s.miss_shares, s.lookups
                )
            }),
        ),
    ] {
        settings.insert(k.to_owned(), v);
    }
    settings
}

async fn run_side_by_side(cfg: &BenchConfig) -> anyhow::Result<BenchReport> {
    let machine = Machine::describe();
    let http = reqwest::Client::builder().pool_max_idle_per_host(16).timeout(Duration::from_secs(60)).build()?;
    let mut env = Env { http: http.clone(), cassandra: None, groups: Vec::new(), progress: cfg.progress };
    let servers = start_servers(cfg, &mut env).await?;

    // Filters get headroom over the keys they hold: the origin resizes (rebuilds at double
    // capacity) a filter whose *estimated* key count passes its capacity, and at exactly full
    // the estimate's noise trips that about half the time.
    let sized = |n: usize| (n as f64 * cfg.capacity_headroom).ceil() as u64;
    let filter = format!("bench-{:016x}", rand::random::<u64>());
    let present = Arc::new(present_keys(cfg.seed, cfg.present));
    step(&env, &format!("preloading {} present keys into {filter} (fp_rate {})", cfg.present, cfg.fp_rate));
    let t0 = Instant::now();
    let spec = FilterSpec {
        name: &filter,
        fp_rate: cfg.fp_rate,
        capacity: sized(cfg.present),
        segment_bytes: cfg.segment_bytes,
    };
    preload(&http, &servers.origin.base, &spec, &present, cfg.progress).await?;
    let preload_secs = t0.elapsed().as_secs_f64();
    let workload = Workload::new(cfg.seed, present.clone(), cfg.miss_share, cfg.zipf_s);

    let mut results = measure_origins(&env, cfg, &workload, &filter, &servers).await?;
    if let Some(freshness) = cfg.edge_freshness_secs {
        results.push(measure_edge(&mut env, cfg, &workload, &filter, &servers, freshness).await?);
    }

    let mut stats_by_filter = BTreeMap::new();
    stats_by_filter.insert(filter.clone(), filter_stats(&http, &servers.origin.base, &filter).await);
    let mut sweep = Vec::new();
    let mut sweep_error = None;
    if let Some(s) = &cfg.sweep {
        // A failed sweep must not lose the side-by-side results measured above.
        if let Err(e) = run_sweep(&env, cfg, s, &servers.origin, &mut sweep, &mut stats_by_filter).await {
            eprintln!("[loadgen] sweep failed: {e:#}");
            sweep_error = Some(format!("{e:#}"));
        }
    }
    let mut report = BenchReport {
        command: cfg.command.clone(),
        machine,
        settings: side_by_side_settings(cfg, &filter, preload_secs),
        targets: results,
        sweep,
        checks: Vec::new(),
        filter_stats: stats_by_filter,
        sweep_error,
        writes: None,
        writes_error: None,
        wall_seconds: 0.0,
    };
    report.checks = checks(&report, cfg);
    Ok(report)
}

/// The miss-share × fp_rate sweep: one filter per fp_rate, every miss share against it.
async fn run_sweep(
    env: &Env,
    cfg: &BenchConfig,
    s: &SweepConfig,
    origin: &Server,
    sweep: &mut Vec<SweepPoint>,
    stats_by_filter: &mut BTreeMap<String, serde_json::Value>,
) -> anyhow::Result<()> {
    let http = &env.http;
    let sized = |n: usize| (n as f64 * cfg.capacity_headroom).ceil() as u64;

    let keys = Arc::new(present_keys(cfg.seed ^ 0x5eed, s.present));
    for &fp in &s.fp_rates {
        let sweep_filter = format!("sweep-{:016x}", rand::random::<u64>());
        step(env, &format!("sweep: preloading {} keys into {sweep_filter} (fp_rate {fp})", s.present));
        let spec =
            FilterSpec { name: &sweep_filter, fp_rate: fp, capacity: sized(s.present), segment_bytes: s.segment_bytes };
        preload(http, &origin.base, &spec, &keys, cfg.progress).await?;
        for &miss in &s.miss_shares {
            let w = Workload::new(cfg.seed ^ 0x5eed, keys.clone(), miss, cfg.zipf_s);
            let before = Samples::scrape(http, &origin.base).await?;
            let spec = DriveSpec {
                label: format!("sweep fp {fp} miss {miss}"),
                base: origin.base.clone(),
                filter: sweep_filter.clone(),
                connections: cfg.connections,
                duration: None,
                max_lookups: Some(s.lookups),
                rate: None,
                progress: cfg.progress,
            };
            let stats = drive(&spec, &w).await?;
            let after = Samples::scrape(http, &origin.base).await?;
            let n = stats.lookups.max(1) as f64;
            let reads = after.delta(&before, "bloomgate_database_reads_total") / n;
            let hit_share = stats.hits as f64 / n;
            sweep.push(SweepPoint {
                fp_rate: fp,
                miss_share: miss,
                lookups: stats.lookups,
                reads_per_lookup: reads,
                theory: (1.0 - miss) + miss * fp,
                fp_observed: fp_from_origin(&before, &after, &sweep_filter),
                hit_share_measured: hit_share,
                excess_reads_per_lookup: reads - hit_share,
                excess_theory: miss * fp,
                filter_expected_fp: None,
                errors: stats.errors.total(),
                wrong_answers: stats.wrong_answers,
            });
        }
        let st = filter_stats(http, &origin.base, &sweep_filter).await;
        let expected = st["expected_fp_rate_now"].as_f64();
        for p in sweep.iter_mut().filter(|p| p.fp_rate == fp) {
            p.filter_expected_fp = expected;
        }
        stats_by_filter.insert(sweep_filter.clone(), st);
    }
    Ok(())
}

/// Issue 6's targets against what was measured.
pub fn checks(report: &BenchReport, cfg: &BenchConfig) -> Vec<Check> {
    let mut out = Vec::new();
    let theory = (1.0 - cfg.miss_share) + cfg.miss_share * cfg.fp_rate;
    if let (Some(f), Some(b)) = (report.target("filter"), report.target("baseline")) {
        let (fr, br) =
            (f.cassandra_reads_per_lookup.unwrap_or(f64::NAN), b.cassandra_reads_per_lookup.unwrap_or(f64::NAN));
        out.push(Check {
            target: format!(
                "Cassandra reads/lookup ≤ 0.21 at {:.0} % misses, fp {} % (theory {theory:.3}), vs 1.0 baseline",
                cfg.miss_share * 100.0,
                cfg.fp_rate * 100.0
            ),
            measured: format!("{fr:.3} with the filter, {br:.3} baseline"),
            met: fr <= 0.21 && (br - 1.0).abs() < 0.01,
        });
    }
    if let Some(e) = report.target("edge") {
        let r = e.origin_requests_per_lookup.unwrap_or(f64::NAN);
        let leaked = e.edge_no_forwarded.unwrap_or(i64::MAX);
        // A lookup that failed (5xx) may or may not have reached the origin before it failed.
        let failed = e.errors.status_5xx as i64;
        out.push(Check {
            target: "origin requests per warm edge lookup ≤ 0.21, zero for edge \"no\" answers".into(),
            measured: format!(
                "{r:.3}; forwarded lookups − lookups the edge did not answer itself = {leaked} (≤ {failed} failed lookups)"
            ),
            met: r <= 0.21 && (0..=failed).contains(&leaked),
        });
    }
    if let (Some(n), Some(f)) = (report.target("filter-negatives"), report.target("floor")) {
        let ratio = n.lookups_per_sec / f.lookups_per_sec.max(1e-9);
        out.push(Check {
            target: "origin negative-lookup throughput ≥ 0.6 × axum hello-world".into(),
            measured: format!("{:.0}/s vs {:.0}/s = {ratio:.2} ×", n.lookups_per_sec, f.lookups_per_sec),
            met: ratio >= 0.6,
        });
    }
    if let Some(h) = report.target("filter-negatives-half") {
        out.push(Check {
            target: "p99 ≤ 2 ms at half the maximum rate (negative path)".into(),
            measured: format!(
                "p99 {:.2} ms at {:.0}/s offered ({:.0}/s answered)",
                h.p99_ms,
                h.fixed_rate.unwrap_or(0.0),
                h.lookups_per_sec
            ),
            met: h.p99_ms <= 2.0,
        });
    }
    let errors: u64 =
        report.targets.iter().map(|t| t.error_total).sum::<u64>() + report.sweep.iter().map(|p| p.errors).sum::<u64>();
    let wrong: u64 = report.targets.iter().map(|t| t.wrong_answers).sum::<u64>()
        + report.sweep.iter().map(|p| p.wrong_answers).sum::<u64>();
    out.push(Check {
        target: "no errors, no wrong answers (no false negatives)".into(),
        measured: format!("{errors} errors, {wrong} wrong answers"),
        met: errors == 0 && wrong == 0,
    });
    out
}
