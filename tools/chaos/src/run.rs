//! One chaos run from start to end: start the processes, create the filter, run the workload
//! with both fault tracks, stop, read every acknowledged key back from Cassandra, scan the
//! logs, check the history and build the report. Cassandra is continued and every process
//! started is stopped on every way out: the end, an error, Ctrl-C / SIGTERM, or a panic.

use crate::cassandra::{cassandra_pid, drop_keyspace, read_back, resume_cassandra, session};
use crate::check::floors::{self, FloorSettings};
use crate::check::{check, durable_keys, CheckSettings};
use crate::cluster::{Cluster, ClusterSettings};
use crate::faults::{FaultSettings, Faults};
use crate::history::{History, LogLine, Recorder};
use crate::keys::KeySpace;
use crate::logs::{automatic_rebuilds, copy_resets, crash_lines, log_tail, panic_lines};
use crate::memory::sample_rss;
use crate::origin_metrics::sample_metrics;
use crate::origin_process::OriginTuning;
use crate::report::{self, Report, RunFacts, RunSettings};
use crate::schedule::RedisKind;
use crate::stalls::{ProbeSettings, Prober};
use crate::workload::{Endpoints, Workload, WorkloadSettings};
use anyhow::Context as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Everything a run is configured with.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// The command line, for the report.
    pub command: String,
    /// This executable (re-executed as `origin`).
    pub exe: PathBuf,
    /// How long to run the schedule (the first round always completes).
    pub duration: Duration,
    /// Origin processes.
    pub origins: usize,
    /// Seed of keys and random choices.
    pub seed: u64,
    /// Start the edge.
    pub edge: bool,
    /// The edge's FRESHNESS_SECS.
    pub freshness_secs: u32,
    /// The workload's rates.
    pub workload: WorkloadSettings,
    /// Fault settings (the Cassandra pid is filled in here).
    pub faults: FaultSettings,
    /// Where Cassandra's pid file is, if not found by itself.
    pub cassandra_pid_file: Option<PathBuf>,
    /// RSS limit per origin, MiB.
    pub rss_limit_mib: u64,
    /// RSS limit of the edge's `workerd`, MiB.
    pub edge_rss_limit_mib: u64,
    /// Cassandra `host:port`.
    pub cassandra: String,
    /// Configs, logs and Redis data.
    pub work_dir: PathBuf,
    /// Keep the run's keyspace at the end (default: dropped).
    pub keep_keyspace: bool,
    /// Write the whole history as JSON lines here.
    pub history_path: Option<PathBuf>,
    /// The origins' configuration.
    pub tuning: OriginTuning,
    /// A Redis Cluster's nodes (`host:port`) the origins share instead of a private Redis.
    pub redis_cluster: Vec<String>,
    /// The worker build `wrangler dev` serves (default: `edge/build`).
    pub edge_build: Option<PathBuf>,
    /// An earlier release's `bloomgate-chaos`, which the odd-numbered origins run.
    pub previous_release: Option<PathBuf>,
    /// A known bug planted in the origins and the edge (a `planted-bugs` build only).
    pub planted_bug: Option<String>,
}

/// The filter every run uses (in a keyspace and a Redis of its own).
pub const FILTER: &str = "chaos";

/// Continues Cassandra from the panic hook, then panics as before.
fn install_panic_hook() {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        resume_cassandra();
        previous(info);
    }));
}

async fn interrupted() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term => {}
    }
}

/// What the driven part of a run hands back.
struct Driven {
    history: History,
    skipped: (u64, u64),
    notes: Vec<String>,
}

/// Runs the whole thing.
pub async fn run(mut options: RunOptions) -> anyhow::Result<Report> {
    install_panic_hook();
    if let Some(why) = options.faults.schedule.unfit(RedisKind::of(&options.redis_cluster), options.edge) {
        anyhow::bail!("{why}");
    }
    find_cassandra(&mut options).await?;
    let keyspace = format!("chaos_{:08x}", rand::random::<u32>());
    let dir = options.work_dir.join(&keyspace);
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .connect_timeout(Duration::from_secs(5))
        .pool_max_idle_per_host(64)
        // Below the keep-alive timeout of wrangler's Node proxy (5 s): a connection it is
        // closing is never reused (that race is a reset, not an answer).
        .pool_idle_timeout(Duration::from_secs(2))
        .build()?;
    let settings = ClusterSettings {
        origins: options.origins,
        exe: options.exe.clone(),
        cassandra: options.cassandra.clone(),
        keyspace: keyspace.clone(),
        dir: dir.clone(),
        edge: options.edge,
        freshness_secs: options.freshness_secs,
        tuning: options.tuning.clone(),
        redis_cluster: options.redis_cluster.clone(),
        edge_build: options.edge_build.clone(),
        planted_bug: options.planted_bug.clone(),
        previous_release: options.previous_release.clone(),
    };
    eprintln!(
        "chaos: starting Redis, {} origins{} in {}",
        options.origins,
        if options.edge { " and the edge" } else { "" },
        dir.display()
    );
    let cluster = Arc::new(Cluster::start(settings, &http).await?);
    let driven = tokio::select! {
        driven = drive(&options, cluster.clone(), &http) => driven,
        _ = interrupted() => Err(anyhow::anyhow!("interrupted")),
    };
    let logs = stop(cluster).await?;
    if !options.keep_keyspace {
        drop_keyspace(&options.cassandra, &keyspace).await;
    }
    let Driven { mut history, skipped, notes } = driven?;
    let automatic_rebuilds = read_logs(&mut history, &logs);
    let keys = KeySpace::new(options.seed);
    if let Some(path) = &options.history_path {
        report::write_history(path, &history, &keys).with_context(|| format!("write {}", path.display()))?;
    }
    let required_faults = options.faults.schedule.required_faults(options.edge, RedisKind::of(&options.redis_cluster));
    let result = check(&history, &check_settings(&options));
    let floor_settings = FloorSettings {
        duration_secs: options.duration.as_secs_f64(),
        origins: options.origins,
        edge: options.edge,
        freshness_secs: f64::from(options.freshness_secs),
        workload: options.workload.clone(),
        required_faults: required_faults.clone(),
        leases: options.tuning.read_consistency == bloomgate_client::api::ReadConsistency::Lease,
    };
    let facts = RunFacts {
        settings: run_settings(&options, keyspace),
        skipped_ops: skipped,
        required_faults,
        floors: floors::evaluate(&history, &result, &floor_settings),
        automatic_rebuilds,
        notes,
        logs: logs.iter().map(|(_, p)| p.display().to_string()).collect(),
    };
    Ok(report::build(&history, &result, &keys, facts))
}

/// Fails unless Cassandra answers; finds its pid for the pause fault (without it, that fault
/// will be missing).
async fn find_cassandra(options: &mut RunOptions) -> anyhow::Result<()> {
    let reachable =
        tokio::time::timeout(Duration::from_secs(3), tokio::net::TcpStream::connect(&options.cassandra)).await;
    anyhow::ensure!(
        matches!(reachable, Ok(Ok(_))),
        "Cassandra is not reachable at {}: start it with `scripts/services start` (or set BG_TEST_CASSANDRA)",
        options.cassandra
    );
    match cassandra_pid(options.cassandra_pid_file.as_deref()) {
        Some((pid, path)) => {
            eprintln!("chaos: Cassandra is pid {pid} ({})", path.display());
            options.faults.cassandra_pid = Some(pid);
        }
        None => eprintln!("chaos: Cassandra's pid file not found: the cassandra_pause fault will be missing"),
    }
    Ok(())
}

/// Continues Cassandra, stops the origins gracefully, then the edge and Redis; the logs to read.
async fn stop(cluster: Arc<Cluster>) -> anyhow::Result<Vec<(String, PathBuf)>> {
    resume_cassandra();
    cluster.stop_origins();
    let logs = cluster.logs();
    // Tasks of an interrupted run drop their handles of the cluster as they are aborted.
    let deadline = Instant::now() + Duration::from_secs(10);
    while Arc::strong_count(&cluster) > 1 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    match Arc::into_inner(cluster) {
        Some(cluster) => tokio::task::spawn_blocking(move || drop(cluster)).await?,
        None => eprintln!("chaos: the cluster is still referenced; Redis and wrangler stop with this process"),
    }
    Ok(logs)
}

/// Adds the logs' panic lines, the local copies the journal's retention dropped, and the
/// edge's last words to `history`; the automatic rebuilds the origins' logs show, by reason.
fn read_logs(history: &mut History, logs: &[(String, PathBuf)]) -> Vec<String> {
    let mut reasons = Vec::new();
    for (source, path) in logs {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        if let Some(origin) = source.strip_prefix("origin-").and_then(|n| n.parse::<u8>().ok()) {
            history.origin_counters.entry(origin).or_default().copy_resets = copy_resets(&text);
        }
        let lines = panic_lines(&text);
        history.panics.extend(lines.into_iter().map(|line| LogLine { source: source.clone(), line }));
        reasons.extend(automatic_rebuilds(&text));
        if let (Some(down), "wrangler") = (&mut history.edge_down, source.as_str()) {
            down.note = crash_lines(&log_tail(path, 64 * 1024)).join(" / ");
        }
    }
    reasons
}

/// What the checker holds the history to.
fn check_settings(options: &RunOptions) -> CheckSettings {
    CheckSettings {
        freshness: u64::from(options.freshness_secs) * 1_000_000,
        edge_origin: crate::cluster::EDGE_ORIGIN,
        rss_limit_kib: options.rss_limit_mib * 1024,
        edge_rss_limit_kib: options.edge_rss_limit_mib * 1024,
    }
}

/// The run's settings, as the report states them.
fn run_settings(options: &RunOptions, keyspace: String) -> RunSettings {
    RunSettings {
        command: options.command.clone(),
        seed: options.seed,
        keyspace,
        filter: FILTER.into(),
        origins: options.origins,
        edge: options.edge,
        freshness_secs: options.freshness_secs,
        rss_limit_mib: options.rss_limit_mib,
        edge_rss_limit_mib: options.edge_rss_limit_mib,
        workload: options.workload.clone(),
        schedule: options.faults.schedule,
        planted_bug: options.planted_bug.clone(),
    }
}

/// The part of the run that uses the started cluster.
async fn drive(options: &RunOptions, cluster: Arc<Cluster>, http: &reqwest::Client) -> anyhow::Result<Driven> {
    let settled = crate::setup::create_filter(&cluster, http, FILTER, options.faults.initial_capacity).await?;
    let rec = Arc::new(Recorder::new());
    if let Some(note) = settled {
        rec.note(note);
    }
    let keys = KeySpace::new(options.seed);
    let endpoints = Endpoints {
        origins: cluster.origins.iter().map(|o| o.base.clone()).collect(),
        edge: cluster.edge.as_ref().map(|e| e.wrangler.base.clone()),
    };
    let workload = Arc::new(Workload::new(
        http.clone(),
        endpoints,
        FILTER.into(),
        keys,
        rec.clone(),
        options.workload.clone(),
        options.seed,
    ));
    let faults = Arc::new(Faults::new(
        cluster.clone(),
        rec.clone(),
        workload.clone(),
        http.clone(),
        FILTER.into(),
        options.faults.clone(),
        options.seed,
    ));
    let cassandra = match session(&options.cassandra).await {
        Ok(s) => Some(Arc::new(s)),
        Err(e) => {
            rec.note(format!("the prober has no Cassandra session ({e:#}): Cassandra stalls are not observed"));
            None
        }
    };
    let prober =
        Prober::start(rec.clone(), ProbeSettings::from_tuning(&options.tuning), cassandra, cluster.redis_url());
    let mut background = tokio::task::JoinSet::new();
    background.spawn(workload.clone().run());
    background.spawn(sample_rss(cluster.clone(), rec.clone()));
    background.spawn(sample_metrics(cluster.clone(), rec.clone(), http.clone()));
    background.spawn(report_progress(rec.clone(), workload.clone()));
    let started = Instant::now();
    let until = started + options.duration;
    eprintln!("chaos: running for {:?} (the first round of faults always completes)", options.duration);
    tokio::join!(faults.clone().sequential_track(until), faults.clone().background_track(started, until));
    // Faults over: heal everything and let the workload run a little longer, so the last
    // writes are read at the edge too and the system shows it is well again.
    heal(&cluster);
    tokio::time::sleep(options.workload.freshness + Duration::from_secs(2)).await;
    workload.stop(Duration::from_secs(40)).await;
    background.abort_all();
    while background.join_next().await.is_some() {}
    prober.stop().await;

    let mut history = rec.take();
    if let Some(down) = &mut history.edge_down {
        down.not_sent = workload.edge_not_sent();
    }
    let acked = durable_keys(&history);
    eprintln!("chaos: reading {} acknowledged keys back from Cassandra", acked.len());
    history.db_checks = read_back(&options.cassandra, &cluster.settings.keyspace, FILTER, &keys, acked).await?;
    Ok(Driven { history, skipped: workload.skipped(), notes: rec.notes() })
}

/// A line on stderr every 10 s: operations, keys acknowledged, operations skipped.
async fn report_progress(rec: Arc<Recorder>, workload: Arc<Workload>) {
    loop {
        tokio::time::sleep(Duration::from_secs(10)).await;
        let (origin, edge) = workload.skipped();
        eprintln!(
            "chaos: {:>6.1}s {} operations, {} keys acknowledged, skipped at the in-flight cap: {origin} to origins, {edge} to the edge",
            rec.now() as f64 / 1e6,
            rec.op_count(),
            workload.acked_count(),
        );
    }
}

/// Continues Cassandra and heals every proxy.
fn heal(cluster: &Cluster) {
    resume_cassandra();
    if let Some(edge) = &cluster.edge {
        edge.proxy.heal();
    }
    for proxy in cluster.redis_proxies() {
        proxy.heal();
    }
}
