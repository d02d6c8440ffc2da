//! The edge's memory under sustained load and churn: the measurement behind BENCHMARKS.md
//! ("Edge memory under sustained load"). Lookups (single keys and batches) at a fixed rate,
//! writes at a share of it, a new generation of one filter every few seconds, for as long as
//! asked; prints the Worker's memory as it goes (`workerd`'s resident memory, the isolate's
//! wasm memory and held bytes), and writes `edge_memory.json` and `edge_memory.png` into
//! `--out`. Every answer is checked; wrong answers are counted.
//!
//! ```sh
//! scripts/services start && scripts/edge-build
//! cargo run --release -p bloomgate-bench --bin edge-memory -- --minutes 30 --rate 100 \
//!   --write-share 0.1 --filters 4 --capacity 1000000 --generation-every 10 --budget 4MiB --out DIR
//! ```
//!
//! `--cache-api false` runs the same with the Cache API bypassed; `BG_TEST_EDGE_ROOT`
//! and `BG_TEST_WRANGLER_INSPECTOR` as in tests/src/edge.rs.

use bloomgate_bench::churn::chart::draw_churn;
use bloomgate_bench::churn::{line, run_churn, summary, ChurnConfig};
use clap::Parser;
use std::path::PathBuf;
use std::time::Duration;

/// What the churn run starts, and how hard it drives it.
#[derive(Parser, Debug)]
struct Args {
    /// Minutes of traffic.
    #[arg(long, default_value_t = 10.0)]
    minutes: f64,
    /// Lookup requests per second (a batch is one).
    #[arg(long, default_value_t = 100.0)]
    rate: f64,
    /// Writes per lookup request.
    #[arg(long, default_value_t = 0.1)]
    write_share: f64,
    /// Share of requests that are 20-key batches.
    #[arg(long, default_value_t = 0.05)]
    batch_share: f64,
    /// Share of single lookups for stored keys.
    #[arg(long, default_value_t = 0.2)]
    hit_share: f64,
    /// Filters churned at once.
    #[arg(long, default_value_t = 4)]
    filters: usize,
    /// Keys each filter is sized for.
    #[arg(long, default_value_t = 1_000_000)]
    capacity: u64,
    /// Keys stored in each filter before the run.
    #[arg(long, default_value_t = 20_000)]
    preload: usize,
    /// Seconds between new generations (a rebuild of the next filter); 0 = none.
    #[arg(long, default_value_t = 10.0)]
    generation_every: f64,
    /// The isolate's budget, EDGE_MAX_HELD_BYTES (e.g. 4MiB); the worker's default if unset.
    #[arg(long)]
    budget: Option<String>,
    /// Use the Cache API (CACHE_API).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    cache_api: bool,
    /// A log line per request (LOG_REQUESTS).
    #[arg(long)]
    log_requests: bool,
    /// Seconds between memory samples.
    #[arg(long, default_value_t = 10.0)]
    sample_every: f64,
    /// Where edge_memory.json and edge_memory.png go.
    #[arg(long)]
    out: Option<PathBuf>,
    /// A TrueType font for the chart (default: DejaVu Sans).
    #[arg(long)]
    font: Option<PathBuf>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let cfg = ChurnConfig {
        duration: Duration::from_secs_f64(args.minutes * 60.0),
        rate: args.rate,
        write_share: args.write_share,
        batch_share: args.batch_share,
        hit_share: args.hit_share,
        filters: args.filters,
        capacity: args.capacity,
        preload: args.preload,
        generation_every: (args.generation_every > 0.0).then(|| Duration::from_secs_f64(args.generation_every)),
        budget: args.budget.clone(),
        cache_api: args.cache_api,
        log_requests: args.log_requests,
        freshness_secs: 2,
        sample_every: Duration::from_secs_f64(args.sample_every),
    };
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let report = run_churn(&cfg, command).await?;
    println!("{}", report.samples.iter().map(line).collect::<Vec<_>>().join("\n"));
    println!("{}", serde_json::to_string_pretty(&report.totals)?);
    print!("{}", summary(&report));
    if let Some(dir) = &args.out {
        std::fs::create_dir_all(dir)?;
        std::fs::write(dir.join("edge_memory.json"), serde_json::to_string_pretty(&report)?)?;
        match draw_churn(&report, dir, args.font.as_deref()) {
            Ok(path) => println!("chart: {}", path.display()),
            Err(e) => eprintln!("no chart: {e}"),
        }
    }
    anyhow::ensure!(report.totals.wrong_answers == 0, "{} wrong answers", report.totals.wrong_answers);
    Ok(())
}
