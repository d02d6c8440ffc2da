//! The origin's negative path on one Redis beside a Redis Cluster of 3 masters, in one run:
//! two `bloomgate-origin` processes, one per Redis, each with the same filter of
//! N keys; rounds alternate between them, each a closed-loop run of lookups of keys never
//! stored (every answer a "no" from the filter), and medians of throughput and of origin and
//! Redis CPU per "no" are printed side by side with their ratio.
//!
//! ```sh
//! scripts/services start && scripts/services start --topology cluster redis
//! cargo build --release -p bloomgate-origin -p bloomgate-bench --bin bloomgate-origin --bin shard-throughput
//! target/release/shard-throughput --keys 100000 --rounds 5 --duration 10
//! ```

use anyhow::Context as _;
use bloomgate_bench::ab::{drop_preloaded, measure, medians, AbArgs, AbLoad, AbRun, AbTarget};
use bloomgate_bench::servers::{start_origin, Launch, OriginSettings};
use bloomgate_bench::workload::{present_keys, Workload};
use bloomgate_tests::procs::pids_matching;
use clap::Parser;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

#[derive(Parser)]
/// The origin's negative path on one Redis beside a 3-master Redis Cluster.
struct Args {
    #[command(flatten)]
    ab: AbArgs,
    /// Connections, each with one request in flight.
    #[arg(long, default_value_t = 32)]
    connections: usize,
    /// The cluster's nodes (any of them).
    #[arg(long, value_delimiter = ',', default_value = "127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003")]
    cluster: Vec<String>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let launch = Launch::Process(args.ab.origin_bin.clone());
    let settings = |redis_url: String, cluster: Vec<String>| OriginSettings {
        redis_url,
        redis_cluster_nodes: cluster,
        cassandra: bloomgate_tests::cassandra_addr(),
        keyspace: "bloomgate_bench".into(),
        filter_enabled: true,
        journal_enabled: true,
        // Every lookup asks Redis: this compares the two Redis deployments, not the local copy.
        extra_env: vec![("BLOOMGATE_LOCAL_COPY_MAX_BYTES".into(), "0".into())],
    };
    let single = start_origin(&launch, &settings(format!("redis://{}/", args.ab.redis), Vec::new())).await?;
    let cluster_urls = args.cluster.iter().map(|n| format!("redis://{n}")).collect();
    let cluster = start_origin(&launch, &settings(String::new(), cluster_urls)).await.context("cluster origin")?;
    let keys = Arc::new(present_keys(11, args.ab.keys));
    let redis_port = args.ab.redis.rsplit(':').next().unwrap_or("6399");
    let targets = [
        AbTarget::origin("1 Redis", single, pids_matching("redis-server", Some(&format!(":{redis_port}"))), &keys)
            .await?,
        AbTarget::origin("3-master cluster", cluster, pids_matching("redis-server", Some("cluster")), &keys).await?,
    ];
    let workload = Workload::new(11, keys, 1.0, 1.0);
    let load = AbLoad { connections: args.connections, duration: Duration::from_secs(args.ab.duration), rate: None };
    let mut runs: Vec<Vec<AbRun>> = vec![Vec::new(), Vec::new()];
    for round in 0..args.ab.rounds {
        for (i, target) in targets.iter().enumerate() {
            let run = measure(target, load, &workload, format!("{}-{round}", target.name)).await?;
            eprintln!(
                "round {round} {:>16}: {:>8.0} no/s, origin {:>5.1} µs + Redis {:>5.1} µs per no, p99 {:.1} ms",
                target.name, run.rate, run.server_us, run.redis_us, run.p99_ms
            );
            runs[i].push(run);
        }
    }
    let summary: Vec<serde_json::Value> = targets
        .iter()
        .zip(&runs)
        .map(|(t, r)| {
            let m = medians(r);
            json!({
                "target": t.name,
                "lookups_per_sec": m.rate,
                "origin_cpu_us_per_no": m.server_us,
                "redis_cpu_us_per_no": m.redis_us,
                "p99_ms": m.p99_ms,
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
    if let Some(out) = &args.ab.out {
        let all = json!({ "summary": summary, "ratio": ratio, "keys": args.ab.keys, "rounds": args.ab.rounds,
            "duration_secs": args.ab.duration, "connections": args.connections });
        std::fs::write(out, serde_json::to_string_pretty(&all)?)?;
    }
    drop_preloaded(&targets).await
}
