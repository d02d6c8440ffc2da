//! Rebuild throughput against a bare scan: is building the filter ever the bottleneck?
//!
//! Loads N keys into Cassandra (once; kept in keyspace `bloomgate_bench`), then alternates, in
//! one run, a bare token-range scan (the same driver, queries and concurrency, keys dropped)
//! and a rebuild's scan-and-build (keys into the blocked filter with the concurrent inserter),
//! and prints medians, their ratio, and the process's peak memory.
//!
//! `cargo run --release -p bloomgate-bench --bin rebuild-throughput -- 1000000`
//! (needs `scripts/services start`; BG_TEST_CASSANDRA overrides the address).

use bloomgate_filter::{BloomFilter, Params};
use bloomgate_origin::store::cassandra::{CassandraDatabase, CassandraSettings};
use bloomgate_origin::store::Database;
use futures::StreamExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

const FILTER: &str = "throughput";
const ROUNDS: usize = 3;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let n: u64 = std::env::args().nth(1).map(|a| a.parse()).transpose()?.unwrap_or(1_000_000);
    let concurrency: usize = std::env::args().nth(2).map(|a| a.parse()).transpose()?.unwrap_or(4);
    let settings = CassandraSettings {
        nodes: vec![bloomgate_tests::cassandra_addr()],
        keyspace: "bloomgate_bench".into(),
        replication: "{'class': 'SimpleStrategy', 'replication_factor': 1}".into(),
        manage_schema: true,
        consistency: scylla::statement::Consistency::One,
        timeout: Duration::from_secs(30),
        delete_margin: Duration::from_secs(1),
        access: Default::default(),
    };
    let store = CassandraDatabase::connect(&settings).await?;
    let have = store.scan_keys(FILTER, concurrency, &|_| {}).await?;
    if have < n {
        load(&store, have, n).await?;
    }
    let params = Params::for_capacity(n, 0.01)?;
    let (mut bare, mut build) = (Vec::new(), Vec::new());
    for round in 0..ROUNDS {
        let t = Instant::now();
        let seen = AtomicU64::new(0);
        let count = store
            .scan_keys(FILTER, concurrency, &|k| {
                std::hint::black_box(k);
                seen.fetch_add(1, Ordering::Relaxed);
            })
            .await?;
        bare.push(count as f64 / t.elapsed().as_secs_f64());
        let t = Instant::now();
        let filter = BloomFilter::new_with_huge_pages(params);
        let count = store.scan_keys(FILTER, concurrency, &|k| filter.insert_shared(k)).await?;
        build.push(count as f64 / t.elapsed().as_secs_f64());
        eprintln!("round {round}: bare {:.0} keys/s, build {:.0} keys/s ({count} keys)", bare[round], build[round]);
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (b, r) = (median(&mut bare), median(&mut build));
    println!("keys                 {n}");
    println!("scan concurrency     {concurrency} token-range queries at a time (64 ranges, pages of 5000)");
    println!("bare scan (median)   {b:.0} keys/s");
    println!("scan + build         {r:.0} keys/s");
    println!("ratio build/bare     {:.2}", r / b);
    println!("filter bytes         {} ({:.1} MiB)", params.total_bytes(), params.total_bytes() as f64 / 1048576.0);
    let peak_rss_kib = bloomgate_tests::procs::status_kib(std::process::id(), "VmHWM").unwrap_or(0);
    println!("peak RSS (VmHWM)     {peak_rss_kib} KiB");
    Ok(())
}

async fn load(store: &CassandraDatabase, from: u64, to: u64) -> anyhow::Result<()> {
    let session = store.session();
    let insert = session.prepare("INSERT INTO bloomgate_bench.keys (filter, key, value) VALUES (?, ?, ?)").await?;
    let started = Instant::now();
    let writes = (from..to).map(|i| {
        let (session, insert) = (session.clone(), insert.clone());
        async move {
            let key = bloomgate_filter::hash_key(&i.to_le_bytes(), 7);
            let mut bytes = key.block_bits.to_le_bytes().to_vec();
            bytes.extend_from_slice(&key.probe_bits.to_le_bytes());
            session.execute_unpaged(&insert, (FILTER, bytes, Vec::<u8>::new())).await
        }
    });
    let mut stream = futures::stream::iter(writes).buffer_unordered(256);
    let mut done = from;
    while let Some(result) = stream.next().await {
        result?;
        done += 1;
        if done.is_multiple_of(100_000) {
            eprintln!("loaded {done} keys ({:.0}/s)", (done - from) as f64 / started.elapsed().as_secs_f64());
        }
    }
    Ok(())
}
