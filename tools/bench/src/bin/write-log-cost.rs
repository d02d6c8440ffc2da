//! What the log of recent writes costs a write, side by side: origins on one Redis and one
//! Cassandra, each on a keyspace of its own, one at cluster version 1 (a write stores its row
//! alone) and one at version 2 (it also logs the key in `recent_writes`, sent with the row),
//! under both read consistencies (`barrier`: nothing else in the write's way; `lease`, the
//! default: the write also waits out the read lease, overlapped with the database). Writes go
//! one at a time to the origins in turn, at a fixed rate, so every configuration meets the same
//! moments of a noisy machine. Prints each one's p50 and p99, the ratio of the logged to the
//! unlogged, and the rows each wrote per key (read back from Cassandra).
//!
//! `cargo run --release -p bloomgate-bench --bin write-log-cost -- [WRITES_PER_ORIGIN] [RATE]`
//! (default 1000 writes per origin, 40 writes/s in all). Needs `scripts/services start`; its
//! keyspaces are made afresh and dropped at the end.

use bloomgate_bench::stats::quantile;
use bloomgate_origin::lease::ReadConsistency;
use bloomgate_origin::store::recent_writes::buckets_between;
use bloomgate_tests::origin::{config, TestOrigin, TOKEN};
use scylla::client::session::Session;
use scylla::client::session_builder::SessionBuilder;
use std::time::{Duration, Instant};

const FILTER: &str = "write-log-cost";

struct Side {
    name: String,
    keyspace: String,
    origin: TestOrigin,
    latencies_ms: Vec<f64>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let per_origin: usize = std::env::args().nth(1).map(|a| a.parse()).transpose()?.unwrap_or(1000);
    let rate: f64 = std::env::args().nth(2).map(|a| a.parse()).transpose()?.unwrap_or(40.0);
    let cql = SessionBuilder::new().known_node(bloomgate_tests::cassandra_addr()).build().await?;
    let run = format!("{:08x}", rand::random::<u32>());
    let mut sides = Vec::new();
    for (mode, consistency) in [("barrier", ReadConsistency::Barrier), ("lease", ReadConsistency::Lease)] {
        for logged in [false, true] {
            let keyspace = format!("bg_logcost_{run}_{mode}_{}", if logged { "on" } else { "off" });
            let mut cfg =
                config(Some(format!("redis://{}/", bloomgate_tests::redis_addr())), &bloomgate_tests::cassandra_addr());
            cfg.cassandra_keyspace = keyspace.clone();
            cfg.read_consistency = consistency;
            cfg.local_copy_max_bytes = 64 << 20;
            let origin = TestOrigin::start(cfg).await;
            if !logged {
                // A cluster not yet finished upgrading: writes store their row alone.
                let reset = format!("UPDATE {keyspace}.cluster_version SET version = 1 WHERE scope = 'cluster'");
                cql.query_unpaged(reset, ()).await?;
            }
            origin.until_cluster_version(if logged { 2 } else { 1 }, Duration::from_secs(60)).await;
            origin.create_filter(FILTER, 1_000_000, 0.01).await;
            let name = format!("{mode}, {}", if logged { "logged" } else { "not logged" });
            sides.push(Side { name, keyspace, origin, latencies_ms: Vec::with_capacity(per_origin) });
        }
    }
    let since = bloomgate_origin::clock::now_ms();
    let gap = Duration::from_secs_f64(1.0 / rate);
    let mut next = Instant::now();
    for i in 0..per_origin * sides.len() {
        let side = &mut sides[i % 4];
        tokio::time::sleep_until(next.into()).await;
        next += gap;
        let key = format!("{:032x}{:032x}", rand::random::<u128>(), rand::random::<u128>());
        let url = format!("{}/v1/filters/{FILTER}/keys/{key}", side.origin.base);
        let started = Instant::now();
        let r = side.origin.http.put(url).bearer_auth(TOKEN).send().await?;
        let elapsed = started.elapsed();
        anyhow::ensure!(r.status().is_success(), "{}: {}", side.name, r.status());
        side.latencies_ms.push(elapsed.as_secs_f64() * 1e3);
    }
    println!("| writes | p50 | p99 | rows per key (keys + recent_writes) |");
    println!("|---|---:|---:|---:|");
    let mut p50s = Vec::new();
    for side in &mut sides {
        side.latencies_ms.sort_by(f64::total_cmp);
        let (p50, p99) = (quantile(&side.latencies_ms, 0.5), quantile(&side.latencies_ms, 0.99));
        let rows = rows_per_key(&cql, &side.keyspace, since).await?;
        println!("| {} | {p50:.2} ms | {p99:.2} ms | {rows:.2} |", side.name);
        p50s.push((p50, p99));
    }
    for (mode, pair) in ["barrier", "lease"].iter().zip(p50s.chunks(2)) {
        println!(
            "{mode}: logged / not logged: p50 {:.3} x ({:+.2} ms), p99 {:.3} x",
            pair[1].0 / pair[0].0,
            pair[1].0 - pair[0].0,
            pair[1].1 / pair[0].1
        );
    }
    for side in sides {
        drop(side.origin);
        cql.query_unpaged(format!("DROP KEYSPACE IF EXISTS {}", side.keyspace), ()).await?;
    }
    Ok(())
}

/// Rows written per key: the filter's rows in `keys` and in `recent_writes` since `since_ms`,
/// over its rows in `keys`.
async fn rows_per_key(cql: &Session, keyspace: &str, since_ms: u64) -> anyhow::Result<f64> {
    let count = |result: scylla::response::query_result::QueryResult| -> anyhow::Result<i64> {
        Ok(result.into_rows_result()?.first_row::<(i64,)>()?.0)
    };
    let keys =
        count(cql.query_unpaged(format!("SELECT COUNT(*) FROM {keyspace}.keys WHERE filter = ?"), (FILTER,)).await?)?;
    let mut logged = 0;
    for bucket in buckets_between(since_ms, bloomgate_origin::clock::now_ms()) {
        let statement = format!("SELECT COUNT(*) FROM {keyspace}.recent_writes WHERE filter = ? AND bucket = ?");
        logged += count(cql.query_unpaged(statement, (FILTER, bucket)).await?)?;
    }
    Ok((keys + logged) as f64 / keys.max(1) as f64)
}
