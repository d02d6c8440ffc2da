//! A rebuild's peak memory, bounded against whole: the `bloomgate-origin rebuild` command run
//! as a process of its own, on one filter much larger than its memory budget, with
//! `rebuild_memory_bytes` at its default (built in runs of segments, one scan each) and at the
//! filter's size (built whole in one scan, as before the budget existed), alternating in rounds.
//! Prints each run's peak RSS (VmHWM, sampled every 10 ms), scans and time, and the medians.
//!
//! `cargo build --release -p bloomgate-origin -p bloomgate-bench && target/release/rebuild-memory
//! [KEYS] [CAPACITY] [ROUNDS]` (default 1000000 keys in a filter sized for 200000000, 236 MiB of
//! bits, 3 rounds). Needs `scripts/services start`; loads the keys once, through the origin's
//! own write path, into keyspace `bloomgate_bench_rebuild` (a filter per capacity), and keeps
//! them for the next run. BG_ORIGIN_BIN names the origin binary (default:
//! target/release/bloomgate-origin).

use bloomgate_origin::config::Config;
use bloomgate_origin::gate::CreateFilter;
use futures::StreamExt;
use std::process::Stdio;
use std::time::{Duration, Instant};

const KEYSPACE: &str = "bloomgate_bench_rebuild";
const BATCH: usize = 1000;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let keys: u64 = std::env::args().nth(1).map(|a| a.parse()).transpose()?.unwrap_or(1_000_000);
    let capacity: u64 = std::env::args().nth(2).map(|a| a.parse()).transpose()?.unwrap_or(200_000_000);
    let rounds: usize = std::env::args().nth(3).map(|a| a.parse()).transpose()?.unwrap_or(3);
    let filter = format!("rebuild-memory-{capacity}");
    let origin = std::env::var("BG_ORIGIN_BIN").unwrap_or_else(|_| "target/release/bloomgate-origin".into());
    let config = bench_config();
    let budget = Config::default().rebuild_memory_bytes;
    let filter_bytes = load(&config, &filter, keys, capacity).await?;
    println!("keys {keys}, filter sized for {capacity}: {:.0} MiB of bits", mib(filter_bytes));
    let mut runs: Vec<(&str, u64, Vec<Run>)> =
        vec![("bounded (default)", budget, Vec::new()), ("whole (one scan)", filter_bytes, Vec::new())];
    for round in 0..rounds {
        for (name, memory, done) in &mut runs {
            let run = rebuild(&origin, &config, &filter, *memory).await?;
            eprintln!(
                "round {round} {name}: peak RSS {:.0} MiB, {} scan(s), held {:.0} MiB, {:.1} s",
                mib(run.peak_rss),
                run.scans,
                mib(run.held),
                run.secs
            );
            done.push(run);
        }
    }
    println!("| rebuild | rebuild_memory_bytes | scans | bits held | peak RSS (median) | time (median) |");
    println!("|---|---:|---:|---:|---:|---:|");
    for (name, memory, done) in &runs {
        let median = |f: &dyn Fn(&Run) -> f64| {
            let mut v: Vec<f64> = done.iter().map(f).collect();
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        println!(
            "| {name} | {:.0} MiB | {} | {:.0} MiB | {:.0} MiB | {:.1} s |",
            mib(*memory),
            done[0].scans,
            mib(done[0].held),
            median(&|r| mib(r.peak_rss)),
            median(&|r| r.secs)
        );
    }
    Ok(())
}

/// One rebuild command's figures.
struct Run {
    peak_rss: u64,
    scans: u64,
    held: u64,
    secs: f64,
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / 1048576.0
}

/// The settings of the origin processes: the test services, a keyspace of the bench's own.
fn bench_config() -> Config {
    let mut config = bloomgate_tests::origin::config(
        Some(format!("redis://{}/", bloomgate_tests::redis_addr())),
        &bloomgate_tests::cassandra_addr(),
    );
    config.cassandra_keyspace = KEYSPACE.into();
    config.cassandra_timeout_ms = 10_000;
    config.local_copy_max_bytes = 0;
    config
}

/// Creates the filter (if it is not there) and writes keys through the origin's write path
/// until the database holds `keys`; the filter's bytes of bits.
async fn load(config: &Config, filter: &str, keys: u64, capacity: u64) -> anyhow::Result<u64> {
    let state = bloomgate_origin::build_state(config.clone()).await?;
    let gate = state.gate;
    if gate.database().filter(filter).await?.is_none() {
        gate.create_filter(filter, CreateFilter::new(capacity, 0.01)).await?;
    }
    let have = gate.database().scan_keys(filter, 4, &|_| {}).await?;
    if have < keys {
        let started = Instant::now();
        let batches = (have..keys).step_by(BATCH).map(|from| {
            let gate = gate.clone();
            async move {
                let batch: Vec<String> = (from..(from + BATCH as u64).min(keys)).map(|i| format!("{i:064x}")).collect();
                gate.insert_batch(filter, &batch).await
            }
        });
        let mut written = futures::stream::iter(batches).buffer_unordered(8);
        while let Some(done) = written.next().await {
            done?;
        }
        eprintln!("loaded {} keys in {:.0} s", keys - have, started.elapsed().as_secs_f64());
    }
    let def = gate.database().filter(filter).await?.ok_or_else(|| anyhow::anyhow!("the filter vanished"))?;
    let sizing = bloomgate_filter::SizingOptions { seed: 0, segment_bytes: def.segment_bytes };
    let params = bloomgate_filter::Params::for_capacity_with(def.capacity, def.fp_rate, sizing)?;
    Ok(params.total_bytes())
}

/// Runs `bloomgate-origin rebuild` with `memory` as its budget, sampling its peak RSS.
async fn rebuild(origin: &str, config: &Config, filter: &str, memory: u64) -> anyhow::Result<Run> {
    let started = Instant::now();
    let mut child = std::process::Command::new(origin)
        .args(["rebuild", "--filter", filter, "--rebuild-memory-bytes", &memory.to_string()])
        .env("BLOOMGATE_REDIS_URL", config.redis_url.clone().unwrap_or_default())
        .env("BLOOMGATE_CASSANDRA_NODES", config.cassandra_nodes.join(","))
        .env("BLOOMGATE_CASSANDRA_KEYSPACE", KEYSPACE)
        .env("BLOOMGATE_CASSANDRA_CONSISTENCY", "one")
        .env("BLOOMGATE_CASSANDRA_TIMEOUT_MS", "10000")
        .env("BLOOMGATE_REBUILD_GRACE_MS", "0")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()?;
    let pid = child.id();
    let mut stdout = child.stdout.take().ok_or_else(|| anyhow::anyhow!("no stdout"))?;
    let report = std::thread::spawn(move || {
        let mut out = String::new();
        std::io::Read::read_to_string(&mut stdout, &mut out).map(|_| out)
    });
    let mut peak_rss = 0;
    let status = loop {
        if let Some(kib) = bloomgate_tests::procs::status_kib(pid, "VmHWM") {
            peak_rss = peak_rss.max(kib * 1024);
        }
        if let Some(status) = child.try_wait()? {
            break status;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    anyhow::ensure!(status.success(), "the rebuild failed: {status}");
    let report = report.join().map_err(|_| anyhow::anyhow!("the report's reader panicked"))??;
    let report: serde_json::Value = serde_json::from_str(&report)?;
    let field = |name: &str| report[name].as_u64().ok_or_else(|| anyhow::anyhow!("no {name} in {report}"));
    Ok(Run { peak_rss, scans: field("scans")?, held: field("held_bytes")?, secs: started.elapsed().as_secs_f64() })
}
