//! The command line of `bloomgate-chaos` (and of `bloomgate-chaos-planted`, the same built
//! with planted bugs for the negative controls): runs writers and readers against several
//! origins and the edge on real Redis, Cassandra and `wrangler dev`, injects faults on a
//! schedule, records every operation and checks the history afterwards. Exit code 0: no
//! violation and every evidence floor met; 1: violations or floors not met; 2: the run itself
//! failed.
//!
//! ```sh
//! scripts/services start && scripts/edge-build
//! cargo build --release -p bloomgate-chaos --bin bloomgate-chaos
//! # what CI runs (tools/chaos/tests/chaos.rs):
//! target/release/bloomgate-chaos run --duration 2m --report chaos.json
//! # a long run, aiming at 10^6 checked operations (a 3-minute release run at these rates but
//! # --read-rate 250 checked 555 operations/s on a 2-core machine; wrangler dev is the limit):
//! target/release/bloomgate-chaos run --duration 30m --write-rate 60 --read-rate 300 \
//!     --edge-read-rate 60 --batch-rate 2 --report chaos-30m.json --summary chaos.md
//! ```
//!
//! `bloomgate-chaos origin --config <file.toml>` serves one origin; `run` starts its origins
//! that way, so each is a process of its own that can be `kill -9`ed.

use crate::faults::FaultSettings;
use crate::origin_process::OriginTuning;
use crate::report;
use crate::run::{run, RunOptions};
use crate::schedule::{self, Schedule};
use crate::workload::WorkloadSettings;
use anyhow::Context as _;
use clap::{Args, Parser};
use std::path::PathBuf;
use std::time::Duration;

/// History checker for bloomgate: faults on a schedule, every operation recorded and checked.
#[derive(Parser)]
#[command(version, about)]
enum Command {
    /// Start Redis, the origins and the edge, run the workload and the faults, check, report.
    Run(Box<RunArgs>),
    /// Print the excuse table (which fault may excuse which error), as RELIABILITY.md shows it.
    Excuses,
    /// Serve one origin from a config file (started by `run`).
    Origin {
        /// The origin's TOML config.
        #[arg(long)]
        config: PathBuf,
    },
}

/// `90s`, `2m`, `1h`, `1500ms`, or seconds.
fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text.find(|c: char| !c.is_ascii_digit() && c != '.').unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let n: f64 = number.parse().map_err(|_| format!("not a duration: {text:?} (try 90s, 2m, 1h)"))?;
    let secs = match unit {
        "" | "s" => n,
        "ms" => n / 1000.0,
        "m" | "min" => n * 60.0,
        "h" => n * 3600.0,
        _ => return Err(format!("unknown unit {unit:?} in {text:?} (ms, s, m, h)")),
    };
    Ok(Duration::from_secs_f64(secs))
}

#[derive(Args)]
struct RunArgs {
    /// How long to run the fault schedule (the first round of faults always completes).
    #[arg(long, default_value = "2m", value_parser = parse_duration)]
    duration: Duration,
    /// Origin processes (at least 2).
    #[arg(long, default_value_t = 2)]
    origins: usize,
    /// Single-key writes per second; each is read back at once through another origin and,
    /// S later, through the edge.
    #[arg(long, default_value_t = 15.0)]
    write_rate: f64,
    /// Random lookups per second through the origins.
    #[arg(long, default_value_t = 40.0)]
    read_rate: f64,
    /// Random lookups per second through the edge.
    #[arg(long, default_value_t = 15.0)]
    edge_read_rate: f64,
    /// Batch writes per second (and as many random batch lookups).
    #[arg(long, default_value_t = 1.0)]
    batch_rate: f64,
    /// Keys per batch write.
    #[arg(long, default_value_t = 10)]
    batch_write_keys: usize,
    /// Keys per random batch lookup.
    #[arg(long, default_value_t = 20)]
    batch_lookup_keys: usize,
    /// Deletes per second (of keys written only to be deleted).
    #[arg(long, default_value_t = 3.0)]
    delete_rate: f64,
    /// Share of the deletes sent as soon as their key's write was acknowledged (through another
    /// origin, read back at once through a third); the others come two seconds after the write.
    #[arg(long, default_value_t = 0.5)]
    delete_after_write_share: f64,
    /// Share of the deleted keys written again (and then checked "seen").
    #[arg(long, default_value_t = 0.5)]
    readd_share: f64,
    /// Share of random lookups for never-written keys.
    #[arg(long, default_value_t = 0.5)]
    absent_share: f64,
    /// Operations in flight at most; more are skipped (and counted).
    #[arg(long, default_value_t = 256)]
    max_in_flight: usize,
    /// Seed of keys and random choices (default: random).
    #[arg(long)]
    seed: Option<u64>,
    /// Write the JSON report here.
    #[arg(long)]
    report: Option<PathBuf>,
    /// Append the Markdown summary to this file.
    #[arg(long)]
    summary: Option<PathBuf>,
    /// Write every operation and fault as JSON lines here.
    #[arg(long)]
    history: Option<PathBuf>,
    /// The edge's freshness bound S (FRESHNESS_SECS).
    #[arg(long, default_value_t = 3)]
    freshness_secs: u32,
    /// How long to wait for the origins to repair the filter after a fault.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    recovery_wait: Duration,
    /// RSS limit per origin, MiB.
    #[arg(long, default_value_t = 512)]
    rss_limit_mib: u64,
    /// RSS limit of the edge's `workerd` (the process running the Worker under wrangler dev), MiB.
    #[arg(long, default_value_t = 512)]
    edge_rss_limit_mib: u64,
    /// The filter's starting capacity (small: it must resize on its own).
    #[arg(long, default_value_t = 2000)]
    initial_capacity: u64,
    /// Capacity of the rebuild whose upload is killed (many segments, a long upload).
    #[arg(long, default_value_t = 4_000_000)]
    upload_capacity: u64,
    /// Run without the edge (no wrangler; the edge_cut fault is left out).
    #[arg(long)]
    no_edge: bool,
    /// Which faults: the whole schedule, or one focused on a single failure (the negative
    /// controls' shortest checks).
    #[arg(long, value_enum, default_value = "full")]
    schedule: Schedule,
    /// The worker build `wrangler dev` serves (a directory with `index.js`, relative to the
    /// repository), e.g. `edge/build-planted` from `scripts/edge-build --planted`.
    #[arg(long)]
    edge_build: Option<PathBuf>,
    /// How the origins' local copies answer "no" (`read_consistency`): `lease` (the default;
    /// the lease evidence floors apply) or `barrier`.
    #[arg(long, default_value = "lease")]
    read_consistency: bloomgate_client::api::ReadConsistency,
    /// A `bloomgate-chaos` binary of an earlier release: the odd-numbered origins run its
    /// `origin` command, the others this build's, all on one Redis and one Cassandra (a rolling
    /// upgrade half done).
    #[arg(long)]
    previous_release: Option<PathBuf>,
    /// Plant this known bug in the origins (`BG_PLANTED_BUG`) and the edge (`PLANTED_BUG`):
    /// only a `planted-bugs` build (`bloomgate-chaos-planted`) has any.
    #[arg(long)]
    planted_bug: Option<String>,
    /// Cassandra `host:port`.
    #[arg(long, env = "BG_TEST_CASSANDRA", default_value = "127.0.0.1:9042")]
    cassandra: String,
    /// Share a running Redis Cluster (`host:port,...`, e.g. from `scripts/services start
    /// --topology cluster redis`) instead of a private Redis: its masters are killed in turn.
    #[arg(long, value_delimiter = ',')]
    redis_cluster: Vec<String>,
    /// Cassandra's pid file (for SIGSTOP); found by itself when `scripts/services` runs it.
    #[arg(long, env = "BG_CASSANDRA_PID_FILE")]
    cassandra_pid_file: Option<PathBuf>,
    /// Directory for configs, logs and Redis data (a subdirectory per run).
    #[arg(long)]
    work_dir: Option<PathBuf>,
    /// Keep the run's Cassandra keyspace.
    #[arg(long)]
    keep_keyspace: bool,
}

/// Parses the command line and runs it.
pub fn main() -> std::process::ExitCode {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("tokio runtime");
    let result = match Command::parse() {
        Command::Origin { config } => runtime.block_on(serve_origin(config)).map(|()| true),
        Command::Excuses => {
            print!("{}", crate::check::excuses::markdown());
            Ok(true)
        }
        Command::Run(args) => runtime.block_on(run_chaos(*args)),
    };
    match result {
        Ok(true) => std::process::ExitCode::SUCCESS,
        Ok(false) => std::process::ExitCode::from(1),
        Err(e) => {
            eprintln!("bloomgate-chaos: {e:#}");
            std::process::ExitCode::from(2)
        }
    }
}

async fn serve_origin(config: PathBuf) -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .init();
    let config = bloomgate_origin::config::Config::from_file(&config)?;
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("cannot listen on {}", config.listen))?;
    let state = bloomgate_origin::build_state(config).await?;
    bloomgate_origin::run(listener, state, async {
        let term = async {
            if let Ok(mut s) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                s.recv().await;
            }
        };
        tokio::select! { _ = tokio::signal::ctrl_c() => {}, _ = term => {} }
    })
    .await?;
    Ok(())
}

async fn run_chaos(a: RunArgs) -> anyhow::Result<bool> {
    anyhow::ensure!(
        a.planted_bug.is_none() || cfg!(feature = "planted-bugs"),
        "this build has no planted bugs: build bloomgate-chaos-planted (cargo build -p bloomgate-chaos --features planted-bugs --bin bloomgate-chaos-planted)"
    );
    let seed = a.seed.unwrap_or_else(rand::random);
    let program = std::env::args().next().map(PathBuf::from);
    let program = program.as_deref().and_then(|p| p.file_name()).map(|n| n.to_string_lossy().into_owned());
    let command = std::iter::once(program.unwrap_or_else(|| "bloomgate-chaos".to_owned()))
        .chain(std::env::args().skip(1))
        .chain((a.seed.is_none()).then(|| format!("--seed {seed}")))
        .collect::<Vec<_>>()
        .join(" ");
    let freshness = Duration::from_secs(u64::from(a.freshness_secs));
    let workload = WorkloadSettings {
        write_rate: a.write_rate,
        read_rate: a.read_rate,
        edge_read_rate: a.edge_read_rate,
        batch_rate: a.batch_rate,
        batch_write_keys: a.batch_write_keys,
        batch_lookup_keys: a.batch_lookup_keys,
        delete_rate: a.delete_rate,
        delete_after_write_share: a.delete_after_write_share,
        readd_share: a.readd_share,
        absent_share: a.absent_share,
        freshness,
        max_in_flight: a.max_in_flight,
    };
    let tuning = OriginTuning {
        journal_max_entries: schedule::journal_max_entries(&workload),
        read_consistency: a.read_consistency,
        ..OriginTuning::default()
    };
    let options = RunOptions {
        command,
        exe: std::env::current_exe()?,
        duration: a.duration,
        origins: a.origins,
        seed,
        edge: !a.no_edge,
        freshness_secs: a.freshness_secs,
        workload: workload.clone(),
        faults: FaultSettings {
            recovery_wait: a.recovery_wait,
            slow_redis_delay: Duration::from_millis(600),
            initial_capacity: a.initial_capacity,
            upload_capacity: a.upload_capacity,
            burst_factor: 10,
            schedule: a.schedule,
            cassandra_pid: None,
        },
        cassandra_pid_file: a.cassandra_pid_file,
        rss_limit_mib: a.rss_limit_mib,
        edge_rss_limit_mib: a.edge_rss_limit_mib,
        cassandra: a.cassandra,
        work_dir: a.work_dir.unwrap_or_else(|| std::env::temp_dir().join("bloomgate-chaos")),
        keep_keyspace: a.keep_keyspace,
        history_path: a.history,
        tuning,
        redis_cluster: a.redis_cluster,
        edge_build: a.edge_build,
        planted_bug: a.planted_bug,
        previous_release: a.previous_release,
    };
    let report = run(options).await?;
    let md = report::markdown(&report);
    println!("{md}");
    if let Some(path) = &a.report {
        std::fs::write(path, serde_json::to_string_pretty(&report)?)
            .with_context(|| format!("write {}", path.display()))?;
        eprintln!("chaos: report written to {}", path.display());
    }
    if let Some(path) = &a.summary {
        use std::io::Write;
        let mut file = std::fs::OpenOptions::new().create(true).append(true).open(path)?;
        writeln!(file, "{md}")?;
    }
    Ok(report.passed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_like_people_write_them() {
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("30m"), Ok(Duration::from_secs(1800)));
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("90"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("1500ms"), Ok(Duration::from_millis(1500)));
        assert!(parse_duration("2 weeks").is_err());
    }
}
