//! The origin's negative path on one Redis beside a Redis Cluster of 3 masters, in one run
//! (issue 11): two `bloomgate-origin` processes, one per Redis, each with the same filter of
//! N keys; rounds alternate between them, each a closed-loop run of lookups of keys never
//! stored (every answer a "no" from the filter), and medians of throughput and of origin and
//! Redis CPU per "no" are printed side by side with their ratio.
//!
//! ```sh
//! scripts/services start && scripts/services start --topology cluster redis
//! cargo build --release -p bloomgate-origin -p bloomgate-tests --bin bloomgate-origin --bin shard-throughput
//! target/release/shard-throughput --keys 100000 --rounds 5 --duration 10
//! ```

use anyhow::Context as _;
use bloomgate_client::api::CreateFilter;
use bloomgate_tests::loadgen::driver::{drive, DriveSpec};
use bloomgate_tests::loadgen::freshness::median;
use bloomgate_tests::loadgen::probe::{pids_matching, CpuGroup};
use bloomgate_tests::loadgen::servers::{start_origin, Launch, OriginSettings, Server};
use bloomgate_tests::loadgen::workload::{present_keys, Workload};
use bloomgate_tests::origin::TOKEN;
use clap::Parser;
use serde_json::json;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

#[derive(Parser)]
struct Args {
    /// Keys stored in each filter before measuring.
    #[arg(long, default_value_t = 100_000)]
    keys: usize,
    /// Rounds; each measures both targets once, alternating.
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// Seconds of each measured run.
    #[arg(long, default_value_t = 10)]
    duration: u64,
    /// Connections, each with one request in flight.
    #[arg(long, default_value_t = 32)]
    connections: usize,
    /// The origin binary.
    #[arg(long, default_value = "target/release/bloomgate-origin")]
    origin_bin: PathBuf,
    /// The single Redis.
    #[arg(long, default_value = "127.0.0.1:6399")]
    redis: String,
    /// The cluster's nodes (any of them).
    #[arg(long, value_delimiter = ',', default_value = "127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003")]
    cluster: Vec<String>,
    /// Where to write the results as JSON.
    #[arg(long)]
    out: Option<PathBuf>,
}

/// One target: its origin and the Redis processes behind it.
struct Target {
    name: &'static str,
    origin: Server,
    origin_cpu: CpuGroup,
    redis_cpu: CpuGroup,
    filter: String,
}

/// What one measured run gave.
#[derive(Clone, Copy, Debug)]
struct Run {
    rate: f64,
    origin_us: f64,
    redis_us: f64,
    p99_ms: f64,
}

async fn prepare(name: &'static str, origin: Server, redis_pids: Vec<u32>, keys: &[String]) -> anyhow::Result<Target> {
    anyhow::ensure!(!redis_pids.is_empty(), "no redis-server process found for the {name} target");
    let client = bloomgate_client::Client::new(&origin.base).with_token(TOKEN);
    let filter = format!("shards-{:08x}", rand::random::<u32>());
    let create = CreateFilter::new(keys.len() as u64 * 2, 0.01);
    client.create_filter(&filter, &create).await.with_context(|| format!("create {filter} on {name}"))?;
    for chunk in keys.chunks(1000) {
        client.insert_batch(&filter, chunk).await.with_context(|| format!("preload {name}"))?;
    }
    let origin_cpu = CpuGroup { name: "origin".into(), pids: vec![origin.pid] };
    let redis_cpu = CpuGroup { name: "redis".into(), pids: redis_pids };
    Ok(Target { name, origin, origin_cpu, redis_cpu, filter })
}

async fn measure(target: &Target, args: &Args, workload: &Workload, label: String) -> anyhow::Result<Run> {
    let spec = DriveSpec {
        label,
        base: target.origin.base.clone(),
        filter: target.filter.clone(),
        connections: args.connections,
        duration: Some(Duration::from_secs(args.duration)),
        max_lookups: None,
        rate: None,
        progress: false,
    };
    let (origin0, redis0) = (target.origin_cpu.seconds(), target.redis_cpu.seconds());
    let stats = drive(&spec, workload).await?;
    let (origin1, redis1) = (target.origin_cpu.seconds(), target.redis_cpu.seconds());
    let lookups = (stats.rate() * args.duration as f64).max(1.0);
    anyhow::ensure!(stats.errors.total() == 0, "{}: errors {:?}", target.name, stats.errors);
    Ok(Run {
        rate: stats.rate(),
        origin_us: (origin1 - origin0) * 1e6 / lookups,
        redis_us: (redis1 - redis0) * 1e6 / lookups,
        p99_ms: stats.quantile_ms(0.99),
    })
}

fn median_of(runs: &[Run], figure: fn(&Run) -> f64) -> f64 {
    median(runs.iter().map(figure).collect()).unwrap_or(0.0)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let launch = Launch::Process(args.origin_bin.clone());
    let settings = |redis_url: String, cluster: Vec<String>| OriginSettings {
        redis_url,
        redis_cluster_nodes: cluster,
        cassandra: bloomgate_tests::cassandra_addr(),
        keyspace: "bloomgate_bench".into(),
        filter_enabled: true,
        journal_enabled: true,
    };
    let single = start_origin(&launch, &settings(format!("redis://{}/", args.redis), Vec::new())).await?;
    let cluster_urls = args.cluster.iter().map(|n| format!("redis://{n}")).collect();
    let cluster = start_origin(&launch, &settings(String::new(), cluster_urls)).await.context("cluster origin")?;
    let keys = present_keys(11, args.keys);
    let redis_port = args.redis.rsplit(':').next().unwrap_or("6399");
    let targets = [
        prepare("1 Redis", single, pids_matching("redis-server", Some(&format!(":{redis_port}"))), &keys).await?,
        prepare("3-master cluster", cluster, pids_matching("redis-server", Some("cluster")), &keys).await?,
    ];
    let workload = Workload::new(11, Arc::new(keys), 1.0, 1.0);
    let mut runs: Vec<Vec<Run>> = vec![Vec::new(), Vec::new()];
    for round in 0..args.rounds {
        for (i, target) in targets.iter().enumerate() {
            let run = measure(target, &args, &workload, format!("{}-{round}", target.name)).await?;
            eprintln!(
                "round {round} {:>16}: {:>8.0} no/s, origin {:>5.1} µs + Redis {:>5.1} µs per no, p99 {:.1} ms",
                target.name, run.rate, run.origin_us, run.redis_us, run.p99_ms
            );
            runs[i].push(run);
        }
    }
    let summary: Vec<serde_json::Value> = targets
        .iter()
        .zip(&runs)
        .map(|(t, r)| {
            json!({
                "target": t.name,
                "lookups_per_sec": median_of(r, |x| x.rate),
                "origin_cpu_us_per_no": median_of(r, |x| x.origin_us),
                "redis_cpu_us_per_no": median_of(r, |x| x.redis_us),
                "p99_ms": median_of(r, |x| x.p99_ms),
            })
        })
        .collect();
    println!("| target | no/s (median) | origin CPU µs per no | Redis CPU µs per no | p99 ms |");
    println!("|---|---:|---:|---:|---:|");
    for s in &summary {
        println!(
            "| {} | {:.0} | {:.1} | {:.1} | {:.1} |",
            s["target"].as_str().unwrap_or_default(),
            s["lookups_per_sec"].as_f64().unwrap_or(0.0),
            s["origin_cpu_us_per_no"].as_f64().unwrap_or(0.0),
            s["redis_cpu_us_per_no"].as_f64().unwrap_or(0.0),
            s["p99_ms"].as_f64().unwrap_or(0.0)
        );
    }
    let ratio =
        summary[1]["lookups_per_sec"].as_f64().unwrap_or(0.0) / summary[0]["lookups_per_sec"].as_f64().unwrap_or(1.0);
    println!("cluster / single throughput: {ratio:.2}");
    if let Some(out) = &args.out {
        let all = json!({ "summary": summary, "ratio": ratio, "keys": args.keys, "rounds": args.rounds,
            "duration_secs": args.duration, "connections": args.connections });
        std::fs::write(out, serde_json::to_string_pretty(&all)?)?;
    }
    Ok(())
}
