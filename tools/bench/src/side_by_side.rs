//! The side-by-side targets: the hello-world floor, the origin without its filter (baseline),
//! the origin with the Redis filter (the mix, negatives only, and negatives at half their
//! maximum rate), and the edge under `wrangler dev` in front of that origin, each measured with
//! the same workload; then the sweep ([`crate::sweep`]) on the filtered origin, and the targets'
//! checks.

use crate::check::Check;
use crate::config::BenchConfig;
use crate::counters::{fp_from_origin, CassandraReads, Samples};
use crate::counting_proxy::{CountingProxy, ProxyTally};
use crate::cpu::{descendants, service_groups, wait_quiet, CpuGroup, CpuReading, OTHERS};
use crate::driver::{drive, DriveSpec, DriveStats};
use crate::filters::{filter_stats, preload, FilterSpec};
use crate::report::{BenchReport, Machine, TargetResult};
use crate::servers::{start_floor, start_origin, Server};
use crate::sweep::run_sweep;
use crate::workload::{present_keys, Workload};
use bloomgate_tests::edge::Wrangler;
use bloomgate_tests::origin::EDGE_SECRET;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What the measured runs share: the client, Cassandra's own read count, the CPU groups.
struct Env {
    http: reqwest::Client,
    cassandra: Option<CassandraReads>,
    groups: Vec<CpuGroup>,
}

/// What is read before and after a measured run.
struct Snapshot {
    origin: Option<Samples>,
    coordinator_reads: Option<u64>,
    proxy: Option<ProxyTally>,
    cpu: CpuReading,
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
            cpu: CpuReading::now(&self.groups),
        })
    }
}

/// Measures one target: waits for the machine to go quiet, warms up, then drives the measured
/// run between two snapshots.
async fn measure(
    env: &Env,
    cfg: &BenchConfig,
    workload: &Workload,
    filter: &str,
    t: Target<'_>,
) -> anyhow::Result<TargetResult> {
    cfg.step(&format!("{}: {}", t.name, t.description));
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
        let others = wait_quiet(&env.groups, cfg.quiet_wait).await;
        cfg.step(&format!("  others on the machine: {others:.2} cores"));
    }
    if !cfg.warmup.is_zero() {
        drive(&spec, &workload).await?;
    }
    let before = env.snapshot(&t).await?;
    let spec = DriveSpec {
        label: t.name.to_owned(),
        duration: Some(t.duration.unwrap_or(cfg.duration)),
        progress: cfg.progress,
        ..spec
    };
    let stats = drive(&spec, &workload).await?;
    let after = env.snapshot(&t).await?;
    let mut result = driven(&t, spec.connections, &stats);
    add_origin_counters(&mut result, &before, &after, filter, &stats);
    if stats.misses > 0 && t.filtered {
        let first_no = if t.proxy.is_some() { "edge" } else { "filter" };
        let stopped = stats.misses_answered_by.get(first_no).copied().unwrap_or(0);
        result.fp_observed = Some((stats.misses - stopped) as f64 / stats.misses as f64);
    }
    let n = stats.lookups.max(1) as f64;
    for (group, secs) in after.cpu.since(&before.cpu, &env.groups) {
        if group != OTHERS {
            result.cpu_ms_per_1k_lookups.insert(group.clone(), secs * 1000.0 / n * 1000.0);
        }
        result.cpu_cores.insert(group, secs / stats.seconds.max(1e-9));
    }
    Ok(result)
}

/// What the client measured of a target's run (the services' counters still to add).
fn driven(t: &Target<'_>, connections: usize, stats: &DriveStats) -> TargetResult {
    TargetResult {
        name: t.name.to_owned(),
        description: t.description.clone(),
        miss_share: t.miss_share,
        connections,
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
    }
}

/// What the run moved in the origin's, Cassandra's and the counting proxy's counters, per lookup.
fn add_origin_counters(
    result: &mut TargetResult,
    before: &Snapshot,
    after: &Snapshot,
    filter: &str,
    stats: &DriveStats,
) {
    let n = stats.lookups.max(1) as f64;
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
}

/// The servers of a side-by-side run.
struct Servers {
    origin: Server,
    baseline: Server,
    floor: Server,
}

/// Starts the origins (filter on, filter off) and the floor, and the CPU groups to measure.
async fn start_servers(cfg: &BenchConfig, env: &mut Env) -> anyhow::Result<Servers> {
    cfg.step("starting the origins (filter on, filter off) and the floor");
    let origin = start_origin(&cfg.origin, &cfg.origin_settings(true, true)).await?;
    let baseline = start_origin(&cfg.origin, &cfg.origin_settings(false, true)).await?;
    let floor = start_floor(&cfg.floor).await?;
    env.cassandra = CassandraReads::connect(&cfg.cassandra, &cfg.keyspace).await;
    let me = std::process::id();
    // In-process servers share this process: their CPU shows under `loadgen` then.
    let mut groups =
        vec![CpuGroup { name: "origin".into(), pids: if origin.pid == me { vec![] } else { vec![origin.pid] } }];
    if baseline.pid != me {
        groups.push(CpuGroup { name: "origin-baseline".into(), pids: vec![baseline.pid] });
    }
    groups.extend(service_groups(&cfg.redis_url));
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
    let r = measure(env, cfg, workload, filter, floor_target).await?;
    let floor_rate = r.lookups_per_sec;
    results.push(r);
    if cfg.half_rate && floor_rate > 0.0 {
        // The control for the p99 target: what this machine's scheduling alone does to the
        // tail of a server at half its rate.
        let half = Target::new("floor-half", "the floor at half its measured maximum rate", &floor.base, 1.0);
        results.push(measure(env, cfg, workload, filter, half.at_rate(floor_rate / 2.0)).await?);
    }
    let describe = "origin, filter disabled: every lookup reads Cassandra";
    let baseline_target = Target::at_origin("baseline", describe, baseline, cfg.miss_share, false);
    results.push(measure(env, cfg, workload, filter, baseline_target).await?);
    let filtered = Target::at_origin("filter", "origin with the Redis filter", origin, cfg.miss_share, true);
    results.push(measure(env, cfg, workload, filter, filtered).await?);
    let describe = "origin with the Redis filter, absent keys only (the negative path)";
    let negatives =
        measure(env, cfg, workload, filter, Target::at_origin("filter-negatives", describe, origin, 1.0, true)).await?;
    let max_negative_rate = negatives.lookups_per_sec;
    results.push(negatives);
    if cfg.half_rate && max_negative_rate > 0.0 {
        let describe = "the negative path at half its measured maximum rate";
        let half = Target::at_origin("filter-negatives-half", describe, origin, 1.0, true);
        results.push(measure(env, cfg, workload, filter, half.at_rate(max_negative_rate / 2.0)).await?);
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
    cfg.step("starting wrangler dev in front of the origin (through a counting proxy)");
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
    let r = measure(env, cfg, workload, filter, target).await?;
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

/// The side-by-side targets, then the sweep, into a report with their checks.
pub(crate) async fn run_side_by_side(cfg: &BenchConfig) -> anyhow::Result<BenchReport> {
    let machine = Machine::describe();
    let http = reqwest::Client::builder().pool_max_idle_per_host(16).timeout(Duration::from_secs(60)).build()?;
    let mut env = Env { http: http.clone(), cassandra: None, groups: Vec::new() };
    let servers = start_servers(cfg, &mut env).await?;

    let filter = format!("bench-{:016x}", rand::random::<u64>());
    let present = Arc::new(present_keys(cfg.seed, cfg.present));
    cfg.step(&format!("preloading {} present keys into {filter} (fp_rate {})", cfg.present, cfg.fp_rate));
    let t0 = Instant::now();
    let spec = FilterSpec {
        name: &filter,
        fp_rate: cfg.fp_rate,
        capacity: cfg.capacity_for(cfg.present as f64),
        segment_bytes: cfg.segment_bytes,
    };
    preload(&servers.origin.base, &spec, &present, cfg.progress).await?;
    let preload_secs = t0.elapsed().as_secs_f64();
    let workload = Workload::new(cfg.seed, present.clone(), cfg.miss_share, cfg.zipf_s);

    let mut results = measure_origins(&env, cfg, &workload, &filter, &servers).await?;
    if let Some(freshness) = cfg.edge_freshness_secs {
        results.push(measure_edge(&mut env, cfg, &workload, &filter, &servers, freshness).await?);
    }

    let mut stats_by_filter = BTreeMap::new();
    stats_by_filter.insert(filter.clone(), filter_stats(&servers.origin.base, &filter).await);
    let mut sweep = Vec::new();
    let mut sweep_error = None;
    if let Some(s) = &cfg.sweep {
        // A failed sweep must not lose the side-by-side results measured above.
        if let Err(e) = run_sweep(&http, cfg, s, &servers.origin, &mut sweep, &mut stats_by_filter).await {
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

/// The side-by-side targets against what was measured.
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
