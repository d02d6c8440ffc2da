//! An origin in a memory-limited cgroup under a burst of full batch writes with lookups beside
//! them: the measurement behind BENCHMARKS.md ("A burst past an origin's memory"). Writes
//! `summary.json` and `summary.md` into `--out`, and the burst's refusal counters as a promtool
//! rule test of the shipped recording rule (`--promtool-test`, run at once when promtool is
//! installed; scripts/lint-deploy runs it in CI). Exits non-zero when the origin was killed,
//! went over the limit, lost an acknowledged key, failed a lookup, or the signal did not rise
//! and fall with the burst.
//!
//! ```sh
//! scripts/services start
//! cargo build --release -p bloomgate-origin -p bloomgate-bench --bin bloomgate-origin --bin origin-burst
//! sudo target/release/origin-burst --limit-mib 512 --writers 96 --burst-secs 120 \
//!   --out docs/bench/burst --promtool-test deploy/prometheus/burst_tests.yml
//! ```

use bloomgate_bench::burst::{run, summary, BurstSpec};
use bloomgate_bench::servers::OriginSettings;
use clap::Parser;
use std::path::PathBuf;

/// What the burst run starts, against what.
#[derive(Parser, Debug)]
struct Args {
    /// The origin binary.
    #[arg(long, default_value = "target/release/bloomgate-origin")]
    origin_bin: PathBuf,
    /// The Redis URL the origin's filter lives in.
    #[arg(long, default_value = "redis://127.0.0.1:6399/")]
    redis: String,
    /// Cassandra `host:port`.
    #[arg(long, default_value = "127.0.0.1:9042")]
    cassandra: String,
    /// The Cassandra keyspace the origin writes to.
    #[arg(long, default_value = "bloomgate_burst")]
    keyspace: String,
    /// The origin's memory limit, MiB.
    #[arg(long, default_value_t = 512)]
    limit_mib: u64,
    /// Writers, each with one batch write in flight.
    #[arg(long, default_value_t = 96)]
    writers: usize,
    /// Seconds of burst.
    #[arg(long, default_value_t = 120)]
    burst_secs: u64,
    /// Seconds of lookups alone before and after (at least 65: the rule's window and a scrape).
    #[arg(long, default_value_t = 65)]
    quiet_secs: u64,
    /// Lookups per second throughout.
    #[arg(long, default_value_t = 200)]
    lookups_per_sec: u32,
    /// Seconds between scrapes of the counters (divides 60).
    #[arg(long, default_value_t = 5)]
    scrape_secs: u64,
    /// Where summary.json and summary.md go.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Where the promtool rule test goes (beside alerts.yml).
    #[arg(long)]
    promtool_test: Option<PathBuf>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    anyhow::ensure!(
        args.quiet_secs >= 60 + args.scrape_secs,
        "--quiet-secs must cover the rule's 60 s window and a scrape"
    );
    let spec = BurstSpec {
        origin_bin: args.origin_bin.clone(),
        settings: OriginSettings {
            redis_url: args.redis.clone(),
            redis_cluster_nodes: Vec::new(),
            cassandra: args.cassandra.clone(),
            keyspace: args.keyspace.clone(),
            filter_enabled: true,
            journal_enabled: true,
            extra_env: Vec::new(),
        },
        limit: args.limit_mib << 20,
        writers: args.writers,
        burst_secs: args.burst_secs,
        quiet_secs: args.quiet_secs,
        lookups_per_sec: args.lookups_per_sec,
        scrape_secs: args.scrape_secs,
    };
    let burst = run(&spec).await?;
    let command: Vec<String> = std::env::args().collect();
    let markdown = summary::markdown(&burst.report, &command.join(" "));
    println!("{markdown}");
    if let Some(dir) = &args.out {
        std::fs::create_dir_all(dir)?;
        std::fs::write(dir.join("summary.json"), serde_json::to_string_pretty(&burst.report)?)?;
        std::fs::write(dir.join("summary.md"), &markdown)?;
    }
    if let Some(path) = &args.promtool_test {
        let header = format!(
            "promtool's rule test of the autoscaling signal on a real burst, written by `origin-burst`\n(tools/bench/src/bin/origin-burst.rs; figures in docs/bench/burst/summary.md): the origin's\nrefusal counters scraped every {} s through {} s of {} writers, and the recording rule's\nvalues computed from them as Prometheus 2.x does. scripts/lint-deploy runs it.",
            spec.scrape_secs, spec.burst_secs, spec.writers
        );
        let labels = "namespace=\"bench\",pod=\"origin-0\",instance=\"10.0.0.1:8080\"";
        std::fs::write(path, burst.series.promtool_test(&header, labels, 3))?;
        match std::process::Command::new("promtool").arg("test").arg("rules").arg(path).status() {
            Ok(status) => anyhow::ensure!(status.success(), "promtool test rules {} failed", path.display()),
            Err(e) => eprintln!("[burst] promtool not run ({e}): scripts/lint-deploy will"),
        }
    }
    let failures = summary::failures(&burst.report);
    anyhow::ensure!(failures.is_empty(), "the burst did not hold: {}", failures.join("; "));
    Ok(())
}
