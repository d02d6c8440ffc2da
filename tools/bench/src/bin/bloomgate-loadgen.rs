//! `bloomgate-loadgen`: the load harness. `run` measures the hello-world floor, the
//! origin without and with its filter, and the edge, side by side in one run, then sweeps miss
//! share × fp_rate; prints Markdown tables and writes `results.json` and PNG charts. With
//! `--write-rate W` it also runs the writes A/B: the edge serving lookups while W keys/s are
//! written, with the origin's insert journal on and off (freshness lag, origin requests and
//! bytes by kind per 1,000 lookups and per write); `--writes-only` runs just that.
//!
//! ```sh
//! scripts/services start && scripts/edge-build
//! cargo build --release -p bloomgate-origin -p bloomgate-bench --bin bloomgate-origin --bin bloomgate-loadgen
//! target/release/bloomgate-loadgen run --out docs/bench
//! target/release/bloomgate-loadgen run --writes-only --write-rate 200 --out docs/bench/writes
//! ```
#![forbid(unsafe_code)]

use anyhow::Context as _;
use bloomgate_bench::chart::draw_all;
use bloomgate_bench::chart_writes::draw_writes;
use bloomgate_bench::config::{BenchConfig, SweepConfig, WritesConfig};
use bloomgate_bench::report::BenchReport;
use bloomgate_bench::run::run_bench;
use bloomgate_bench::servers::{serve_floor, Launch};
use clap::{Args, Parser};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// Load generator for bloomgate: what the filter saves, side by side.
#[derive(Parser)]
#[command(version, about)]
enum Command {
    /// Run every target and the sweep; print tables, write JSON and charts.
    Run(Box<RunArgs>),
    /// Draw the writes A/B's charts again from a results.json (into its directory).
    Charts {
        /// A `run`'s results.json with a writes A/B.
        #[arg(long)]
        from: PathBuf,
        /// TrueType font for chart text (default: DejaVu Sans from fonts-dejavu-core).
        #[arg(long)]
        font: Option<PathBuf>,
    },
    /// Serve the axum hello-world floor (started by `run` as a child process).
    Floor {
        /// Address to listen on.
        #[arg(long)]
        listen: SocketAddr,
    },
}

#[derive(Args)]
struct RunArgs {
    /// Seed of keys and lookup streams.
    #[arg(long, default_value_t = 6)]
    seed: u64,
    /// Present keys preloaded into the main filter (also its capacity).
    #[arg(long, default_value_t = 100_000)]
    present: usize,
    /// The main filter's false-positive rate.
    #[arg(long, default_value_t = 0.01)]
    fp_rate: f64,
    /// Filters are created for this many times the keys loaded into them (the origin resizes
    /// a filter whose estimated keys pass its capacity).
    #[arg(long, default_value_t = 1.1)]
    capacity_headroom: f64,
    /// Share of lookups for absent keys.
    #[arg(long, default_value_t = 0.8)]
    miss_share: f64,
    /// Zipf exponent of hits over the present keys.
    #[arg(long, default_value_t = 0.99)]
    zipf: f64,
    /// Connections per target.
    #[arg(long, default_value_t = 64)]
    connections: usize,
    /// Seconds per measured run.
    #[arg(long, default_value_t = 15.0)]
    duration: f64,
    /// Seconds of unmeasured warm-up before each run.
    #[arg(long, default_value_t = 3.0)]
    warmup: f64,
    /// Skip the fixed-rate run of the negative path at half its maximum.
    #[arg(long)]
    no_half_rate: bool,
    /// Skip the edge (wrangler dev).
    #[arg(long)]
    no_edge: bool,
    /// Seconds of the edge's measured run (default: --duration).
    #[arg(long)]
    edge_duration: Option<f64>,
    /// Connections for the edge (default: --connections).
    #[arg(long)]
    edge_connections: Option<usize>,
    /// Seconds to wait, before each run, for the rest of the machine to go quiet (0 = don't).
    #[arg(long, default_value_t = 30.0)]
    quiet_wait: f64,
    /// The edge's freshness bound S, seconds.
    #[arg(long, default_value_t = 5)]
    edge_freshness: u32,
    /// The origin binary (default: `bloomgate-origin` next to this executable).
    #[arg(long)]
    origin_bin: Option<PathBuf>,
    /// Run the origins and the floor in this process, each on a runtime of its own.
    #[arg(long)]
    in_process: bool,
    /// Redis URL.
    #[arg(long, env = "BG_TEST_REDIS_URL", default_value = "redis://127.0.0.1:6399/")]
    redis_url: String,
    /// Cassandra host:port.
    #[arg(long, env = "BG_TEST_CASSANDRA", default_value = "127.0.0.1:9042")]
    cassandra: String,
    /// Cassandra keyspace.
    #[arg(long, default_value = "bloomgate_bench")]
    keyspace: String,
    /// Skip the miss-share × fp_rate sweep.
    #[arg(long)]
    no_sweep: bool,
    /// Present keys per sweep filter.
    #[arg(long, default_value_t = 20_000)]
    sweep_present: usize,
    /// Segment size of every filter the run creates, bytes (a power of two ≥ 64; 0 = the
    /// origin's default, 64 KiB, which over-sizes filters of 10⁵ keys).
    #[arg(long, default_value_t = 4096)]
    segment_bytes: u64,
    /// Lookups per sweep point.
    #[arg(long, default_value_t = 20_000)]
    sweep_lookups: u64,
    /// Directory for results.json and the charts.
    #[arg(long, default_value = "docs/bench")]
    out: PathBuf,
    /// TrueType font for chart text (default: DejaVu Sans from fonts-dejavu-core).
    #[arg(long)]
    font: Option<PathBuf>,
    /// Threads of the load generator's own runtime (1 = like `wrk -t1`).
    #[arg(long, default_value_t = 1)]
    client_threads: usize,
    /// Keys written per second through the origin's write API in the writes A/B (the
    /// insert journal on and off); 0 = no writes A/B.
    #[arg(long, default_value_t = 0.0)]
    write_rate: f64,
    /// Run only the writes A/B (skip the side-by-side targets and the sweep).
    #[arg(long)]
    writes_only: bool,
    /// Measure the filters of an earlier writes A/B again instead of preloading new ones:
    /// `--write-filters JOURNAL_SIDE NO_JOURNAL_SIDE` (same --seed and --write-present as that
    /// run). The run writes keys of its own (a salt per run): its first use re-added the earlier
    /// run's keys, which set no bit, and its figures were not used (BENCHMARKS.md). With
    /// `--write-journal-only`, the journal side's alone.
    #[arg(long, num_args = 1..=2)]
    write_filters: Option<Vec<String>>,
    /// Keys preloaded into each side's filter of the writes A/B.
    #[arg(long, default_value_t = 1_000_000)]
    write_present: usize,
    /// Segment size of the writes A/B's filters, bytes (0 = the origin's default, 64 KiB).
    #[arg(long, default_value_t = 0)]
    write_segment_bytes: u64,
    /// Lookups per second at the front in the writes A/B, the same on both sides (0 = closed loop).
    #[arg(long, default_value_t = 100.0)]
    write_lookup_rate: f64,
    /// Connections for those lookups.
    #[arg(long, default_value_t = 16)]
    write_lookup_connections: usize,
    /// Connections the writes go over (at most one write in flight on each).
    #[arg(long, default_value_t = 8)]
    writers: usize,
    /// Seconds of each side's measured run at the front (default: --edge-duration, else --duration).
    #[arg(long)]
    write_duration: Option<f64>,
    /// Seconds of lookups and writes before it, unmeasured (the edge fetches its segments).
    #[arg(long, default_value_t = 10.0)]
    write_warmup: f64,
    /// Seconds of writes to the origin alone before each side's front run (0 = none): the
    /// journal's cost on the write path.
    #[arg(long, default_value_t = 15.0)]
    write_origin_duration: f64,
    /// A/B rounds; the side that goes first alternates.
    #[arg(long, default_value_t = 1)]
    write_rounds: usize,
    /// Run only the journal side of the writes A/B.
    #[arg(long)]
    write_journal_only: bool,
    /// Capacity of the writes A/B's filters (0 = what the preload and the writes need): e.g. a
    /// filter several times the edge isolate's budget.
    #[arg(long, default_value_t = 0)]
    write_capacity: u64,
    /// A setting of the edge worker, `NAME=VALUE` (repeatable), e.g. `EDGE_MAX_HELD_BYTES=32MiB`.
    #[arg(long = "edge-var", value_parser = edge_var)]
    edge_vars: Vec<(String, String)>,
    /// Follow one acknowledged key in this many until the front answers "seen".
    #[arg(long, default_value_t = 100)]
    probe_every: u64,
    /// Milliseconds between two lookups of a followed key.
    #[arg(long, default_value_t = 100)]
    probe_interval_ms: u64,
    /// A followed key not "seen" within S plus this many milliseconds counts as never seen.
    #[arg(long, default_value_t = 2000)]
    probe_margin_ms: u64,
}

fn main() -> anyhow::Result<()> {
    match Command::parse() {
        Command::Floor { listen } => {
            let rt = tokio::runtime::Runtime::new()?;
            rt.block_on(async {
                let listener = tokio::net::TcpListener::bind(listen).await?;
                serve_floor(listener, async {
                    let _ = tokio::signal::ctrl_c().await;
                })
                .await
            })?;
            Ok(())
        }
        Command::Run(args) => run(*args),
        Command::Charts { from, font } => {
            let text = std::fs::read_to_string(&from).with_context(|| format!("read {}", from.display()))?;
            let report: serde_json::Value =
                serde_json::from_str(&text).with_context(|| format!("{} is not JSON", from.display()))?;
            anyhow::ensure!(
                report["writes"].is_object(),
                "{} has no writes A/B (run with --write-rate)",
                from.display()
            );
            let dir = from.parent().unwrap_or(std::path::Path::new("."));
            for f in draw_writes(&report["writes"], dir, font.as_deref()).map_err(anyhow::Error::msg)? {
                eprintln!("[loadgen] wrote {}", f.display());
            }
            Ok(())
        }
    }
}

fn run(args: RunArgs) -> anyhow::Result<()> {
    anyhow::ensure!(!args.writes_only || args.write_rate > 0.0, "--writes-only needs --write-rate");
    let me = std::env::current_exe()?;
    let cfg = config(&args, &me)?;
    let rt = if args.client_threads <= 1 {
        tokio::runtime::Builder::new_current_thread().enable_all().build()?
    } else {
        tokio::runtime::Builder::new_multi_thread().worker_threads(args.client_threads).enable_all().build()?
    };
    let report = rt.block_on(run_bench(&cfg))?;
    write_results(&report, &args)?;
    eprintln!("[loadgen] done in {:.0} s", report.wall_seconds);
    Ok(())
}

/// How the origins and the floor run: threads of this process, or child processes of the
/// origin binary and of this executable (`floor`).
fn launches(args: &RunArgs, me: &std::path::Path) -> anyhow::Result<(Launch, Launch)> {
    if args.in_process {
        return Ok((Launch::Thread, Launch::Thread));
    }
    let bin =
        args.origin_bin.clone().unwrap_or_else(|| me.parent().map(|d| d.join("bloomgate-origin")).unwrap_or_default());
    anyhow::ensure!(
        bin.exists(),
        "{} not found: `cargo build --release -p bloomgate-origin`, or pass --origin-bin or --in-process",
        bin.display()
    );
    Ok((Launch::Process(bin), Launch::Process(me.to_owned())))
}

/// The run's configuration, from the arguments.
fn config(args: &RunArgs, me: &std::path::Path) -> anyhow::Result<BenchConfig> {
    let (origin, floor) = launches(args, me)?;
    Ok(BenchConfig {
        seed: args.seed,
        present: args.present,
        fp_rate: args.fp_rate,
        capacity_headroom: args.capacity_headroom,
        segment_bytes: (args.segment_bytes > 0).then_some(args.segment_bytes),
        miss_share: args.miss_share,
        zipf_s: args.zipf,
        connections: args.connections,
        duration: Duration::from_secs_f64(args.duration),
        warmup: Duration::from_secs_f64(args.warmup),
        half_rate: !args.no_half_rate,
        edge_freshness_secs: (!args.no_edge).then_some(args.edge_freshness),
        origin,
        floor,
        redis_url: args.redis_url.clone(),
        cassandra: args.cassandra.clone(),
        keyspace: args.keyspace.clone(),
        sweep: (!args.no_sweep && !args.writes_only).then(|| SweepConfig {
            present: args.sweep_present,
            fp_rates: vec![0.1, 0.01, 0.001],
            miss_shares: vec![0.0, 0.5, 0.8, 0.95],
            lookups: args.sweep_lookups,
            segment_bytes: (args.segment_bytes > 0).then_some(args.segment_bytes),
        }),
        edge_connections: args.edge_connections,
        edge_duration: args.edge_duration.map(Duration::from_secs_f64),
        quiet_wait: Duration::from_secs_f64(args.quiet_wait),
        progress: true,
        side_by_side: !args.writes_only,
        writes: (args.write_rate > 0.0).then(|| WritesConfig {
            rate: args.write_rate,
            writers: args.writers,
            present: args.write_present,
            segment_bytes: (args.write_segment_bytes > 0).then_some(args.write_segment_bytes),
            lookup_rate: args.write_lookup_rate,
            lookup_connections: args.write_lookup_connections,
            duration: Duration::from_secs_f64(args.write_duration.or(args.edge_duration).unwrap_or(args.duration)),
            warmup: Duration::from_secs_f64(args.write_warmup),
            origin_duration: Duration::from_secs_f64(args.write_origin_duration),
            rounds: args.write_rounds.max(1),
            probe_every: args.probe_every.max(1),
            probe_interval: Duration::from_millis(args.probe_interval_ms.max(1)),
            probe_margin: Duration::from_millis(args.probe_margin_ms),
            reuse_filters: args.write_filters.clone().map(|f| [f[0].clone(), f.get(1).cloned().unwrap_or_default()]),
            journal_only: args.write_journal_only,
            capacity: (args.write_capacity > 0).then_some(args.write_capacity),
            edge_vars: args.edge_vars.clone(),
        }),
        command: std::env::args()
            .map(|a| if a == me.to_string_lossy() { "bloomgate-loadgen".into() } else { a })
            .collect::<Vec<_>>()
            .join(" "),
    })
}

/// `NAME=VALUE`, as `--edge-var` takes it.
fn edge_var(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((name, value)) if !name.is_empty() => Ok((name.to_owned(), value.to_owned())),
        _ => Err(format!("{text:?} is not NAME=VALUE")),
    }
}

/// Prints the tables and writes `results.json` and the charts into `--out`.
fn write_results(report: &BenchReport, args: &RunArgs) -> anyhow::Result<()> {
    println!("{}", report.markdown());
    std::fs::create_dir_all(&args.out).with_context(|| format!("create {}", args.out.display()))?;
    let json_path = args.out.join("results.json");
    std::fs::write(&json_path, serde_json::to_string_pretty(report)? + "\n")?;
    eprintln!("[loadgen] wrote {}", json_path.display());
    // The side-by-side targets' charts, then the writes A/B's.
    let mut charts =
        if report.targets.is_empty() { Ok(Vec::new()) } else { draw_all(report, &args.out, args.font.as_deref()) };
    if let (Ok(files), Some(writes)) = (&mut charts, serde_json::to_value(report)?.get("writes")) {
        if writes.is_object() {
            match draw_writes(writes, &args.out, args.font.as_deref()) {
                Ok(more) => files.extend(more),
                Err(e) => charts = Err(e),
            }
        }
    }
    match charts {
        Ok(files) => {
            for f in files {
                eprintln!("[loadgen] wrote {}", f.display());
            }
        }
        Err(e) => eprintln!("[loadgen] charts skipped: {e}"),
    }
    Ok(())
}
