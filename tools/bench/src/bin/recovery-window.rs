//! How long a filter is off after Redis loses its data, side by side: recovered by a scan of
//! every key (no checkpoint to start from) against recovered from the newest checkpoint and the
//! writes logged since. For each size, for each loss (`FLUSHALL`, Redis restarted empty, Redis
//! restarted from an older snapshot), in turn: the window from the loss to the first lookup of
//! an absent key answered by the filter again, and the lookups sent to the database meanwhile
//! (absent keys at a fixed rate). A writer writes at a fixed rate throughout, so the replay has
//! writes to add. Prints a table and the medians.
//!
//! `cargo build --release -p bloomgate-origin -p bloomgate-bench && target/release/recovery-window
//! [KEYS,...] [ROUNDS]` (default 1000000 and 1 round). Needs `scripts/services start` (the
//! Cassandra; Redis is the bench's own). Each run's origin is a process of its own (BG_ORIGIN_BIN,
//! default target/release/bloomgate-origin), checkpointing every 2 s or never, stopped after the
//! run. Keys are loaded once straight into Cassandra (keyspace `bloomgate_bench_recovery`, a
//! filter per size sized for twice its keys) and kept for the next run.

use bloomgate_origin::store::cassandra::{CassandraDatabase, CassandraSettings};
use bloomgate_origin::store::Database;
use bloomgate_tests::origin::{SINGLE_NODE_REPLICATION, TOKEN};
use bloomgate_tests::redis_server::RedisServer;
use futures::StreamExt;
use scylla::client::session::Session;
use sha2::{Digest, Sha256};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const KEYSPACE: &str = "bloomgate_bench_recovery";
/// Lookups of absent keys per second during each run.
const LOOKUP_RATE: f64 = 200.0;
/// Writes per second during each run.
const WRITE_RATE: f64 = 20.0;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Loss {
    FlushAll,
    RestartEmpty,
    Rollback,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Mode {
    Scan,
    Checkpoint,
}

struct Run {
    keys: u64,
    loss: Loss,
    mode: Mode,
    window_s: f64,
    database_lookups: u64,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let sizes: Vec<u64> = std::env::args()
        .nth(1)
        .map(|a| a.split(',').map(|n| n.parse()).collect::<Result<_, _>>())
        .transpose()?
        .unwrap_or_else(|| vec![1_000_000]);
    let rounds: usize = std::env::args().nth(2).map(|a| a.parse()).transpose()?.unwrap_or(1);
    let cql = scylla::client::session_builder::SessionBuilder::new()
        .known_node(bloomgate_tests::cassandra_addr())
        .build()
        .await?;
    let mut runs = Vec::new();
    for &keys in &sizes {
        let filter = format!("recovery-{keys}");
        let mut redis = RedisServer::start();
        let first = OriginProcess::start(&redis, 0).await?;
        let create = serde_json::json!({ "capacity": keys * 2, "fp_rate": 0.01 });
        let r = first
            .http
            .put(format!("{}/v1/filters/{filter}", first.base))
            .bearer_auth(TOKEN)
            .json(&create)
            .send()
            .await?;
        anyhow::ensure!(r.status().is_success(), "create {filter}: {}", r.status());
        drop(first);
        load(&cql, &filter, keys).await?;
        for round in 0..rounds {
            for mode in [Mode::Scan, Mode::Checkpoint] {
                for loss in [Loss::FlushAll, Loss::RestartEmpty, Loss::Rollback] {
                    let run = one_run(&cql, &mut redis, &filter, keys, mode, loss).await?;
                    eprintln!(
                        "round {round} {keys} keys {loss:?} {mode:?}: off {:.2} s, {} lookups to the database",
                        run.window_s, run.database_lookups
                    );
                    runs.push(run);
                }
            }
        }
    }
    println!("| keys | loss | recovered by | filter off (median) | lookups sent to the database (median) |");
    println!("|---:|---|---|---:|---:|");
    for &keys in &sizes {
        for loss in [Loss::FlushAll, Loss::RestartEmpty, Loss::Rollback] {
            for mode in [Mode::Scan, Mode::Checkpoint] {
                let mut mine: Vec<&Run> =
                    runs.iter().filter(|r| r.keys == keys && r.loss == loss && r.mode == mode).collect();
                mine.sort_by(|a, b| a.window_s.total_cmp(&b.window_s));
                let median = mine[mine.len() / 2];
                println!("| {keys} | {loss:?} | {mode:?} | {:.2} s | {} |", median.window_s, median.database_lookups);
            }
        }
    }
    Ok(())
}

/// An origin process on the bench's Redis and keyspace; killed when dropped.
struct OriginProcess {
    child: std::process::Child,
    base: String,
    http: reqwest::Client,
}

impl OriginProcess {
    /// Starts one checkpointing every `checkpoint_ms` (0: never) and waits until it answers.
    async fn start(redis: &RedisServer, checkpoint_ms: u64) -> anyhow::Result<OriginProcess> {
        let bin = std::env::var("BG_ORIGIN_BIN").unwrap_or_else(|_| "target/release/bloomgate-origin".into());
        let port = bloomgate_tests::free_port()?;
        let child = std::process::Command::new(bin)
            .arg("serve")
            .env("BLOOMGATE_LISTEN", format!("127.0.0.1:{port}"))
            .env("BLOOMGATE_REDIS_URL", redis.url())
            .env("BLOOMGATE_REDIS_TIMEOUT_MS", "1000")
            .env("BLOOMGATE_CASSANDRA_NODES", bloomgate_tests::cassandra_addr())
            .env("BLOOMGATE_CASSANDRA_KEYSPACE", KEYSPACE)
            .env("BLOOMGATE_CASSANDRA_REPLICATION", SINGLE_NODE_REPLICATION)
            .env("BLOOMGATE_CASSANDRA_CONSISTENCY", "one")
            .env("BLOOMGATE_CASSANDRA_TIMEOUT_MS", "5000")
            .env("BLOOMGATE_WRITER_TOKENS", TOKEN)
            .env("BLOOMGATE_RECOVERY_INTERVAL_MS", "200")
            .env("BLOOMGATE_CHECKPOINT_INTERVAL_MS", checkpoint_ms.to_string())
            .env("RUST_LOG", "warn")
            .stdout(std::process::Stdio::null())
            .spawn()?;
        let origin = OriginProcess { child, base: format!("http://127.0.0.1:{port}"), http: reqwest::Client::new() };
        let deadline = Instant::now() + Duration::from_secs(60);
        while origin.http.get(format!("{}/healthz", origin.base)).send().await.is_err() {
            anyhow::ensure!(Instant::now() < deadline, "the origin did not start");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(origin)
    }
}

impl Drop for OriginProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// How the bench reads checkpoints: as an origin would, applying no schema.
fn operator_settings() -> CassandraSettings {
    let cfg = bloomgate_origin::config::Config {
        cassandra_nodes: vec![bloomgate_tests::cassandra_addr()],
        cassandra_keyspace: KEYSPACE.into(),
        cassandra_manage_schema: false,
        cassandra_consistency: "one".into(),
        ..Default::default()
    };
    bloomgate_origin::cassandra_settings(&cfg).expect("the bench's settings")
}

/// Key `i` of a filter: 32 bytes, as a SHA-256-hex filter stores them.
fn key(i: u64) -> [u8; 32] {
    Sha256::digest(i.to_le_bytes()).into()
}

/// Loads keys `0..n` of `filter` straight into Cassandra, unless the last one is there (it is
/// written after all the others).
async fn load(cql: &Session, filter: &str, n: u64) -> anyhow::Result<()> {
    let insert = cql.prepare(format!("INSERT INTO {KEYSPACE}.keys (filter, key, value) VALUES (?, ?, 0x)")).await?;
    let last = cql
        .query_unpaged(
            format!("SELECT key FROM {KEYSPACE}.keys WHERE filter = ? AND key = ?"),
            (filter, key(n - 1).to_vec()),
        )
        .await?;
    if last.into_rows_result()?.rows_num() > 0 {
        return Ok(());
    }
    let started = Instant::now();
    let done = AtomicU64::new(0);
    let inserts = (0..n - 1).map(|i| {
        let (insert, done) = (&insert, &done);
        async move {
            cql.execute_unpaged(insert, (filter, key(i).to_vec())).await?;
            let d = done.fetch_add(1, Ordering::Relaxed) + 1;
            if d % 1_000_000 == 0 {
                eprintln!("loaded {d} keys in {:.0} s", started.elapsed().as_secs_f64());
            }
            anyhow::Ok(())
        }
    });
    let results: Vec<anyhow::Result<()>> = futures::stream::iter(inserts).buffer_unordered(256).collect().await;
    results.into_iter().collect::<anyhow::Result<()>>()?;
    cql.execute_unpaged(&insert, (filter, key(n - 1).to_vec())).await?;
    eprintln!("loaded {n} keys of {filter} in {:.0} s", started.elapsed().as_secs_f64());
    Ok(())
}

/// Who answered a lookup of a random absent key, if the origin answered.
async fn answered_by(http: &reqwest::Client, base: &str, filter: &str) -> Option<String> {
    let absent = format!("{:032x}{:032x}", rand::random::<u128>(), rand::random::<u128>());
    let r = http.get(format!("{base}/v1/filters/{filter}/keys/{absent}")).send().await.ok()?;
    let body: serde_json::Value = r.json().await.ok()?;
    body["answered_by"].as_str().map(str::to_owned)
}

async fn until_filter_answers(o: &OriginProcess, filter: &str, within: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + within;
    while answered_by(&o.http, &o.base, filter).await.as_deref() != Some("filter") {
        anyhow::ensure!(Instant::now() < deadline, "the filter did not answer within {within:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}

/// One loss, recovered in one mode: the window and the lookups sent to the database in it.
async fn one_run(
    cql: &Session,
    redis: &mut RedisServer,
    filter: &str,
    keys: u64,
    mode: Mode,
    loss: Loss,
) -> anyhow::Result<Run> {
    let o = OriginProcess::start(redis, if mode == Mode::Checkpoint { 2000 } else { 0 }).await?;
    until_filter_answers(&o, filter, Duration::from_secs(3600)).await?;
    let operator = CassandraDatabase::connect(&operator_settings()).await?;
    let stop = Arc::new(AtomicBool::new(false));
    let writer = tokio::spawn(write_steadily(o.http.clone(), o.base.clone(), filter.to_owned(), stop.clone()));
    match mode {
        Mode::Scan => {
            cql.query_unpaged(format!("DELETE FROM {KEYSPACE}.checkpoints WHERE filter = ?"), (filter,)).await?;
        }
        Mode::Checkpoint => {
            // A checkpoint of the generation in use, then a few seconds of writes after it.
            let since = bloomgate_origin::clock::now_ms();
            while operator.checkpoint(filter).await?.is_none_or(|c| c.taken_at_ms <= since) {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
    let snapshot = std::env::temp_dir().join(format!("bloomgate-recovery-window-{}.rdb", std::process::id()));
    if loss == Loss::Rollback {
        let mut conn = redis.connection().await;
        let _: () = redis::cmd("SAVE").query_async(&mut conn).await?;
        std::fs::copy(redis.snapshot_path(), &snapshot)?;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let database_lookups = Arc::new(AtomicU64::new(0));
    let lookups_stop = Arc::new(AtomicBool::new(false));
    let lookups = tokio::spawn(look_up_steadily(
        o.http.clone(),
        o.base.clone(),
        filter.to_owned(),
        lookups_stop.clone(),
        database_lookups.clone(),
    ));
    let lost_at = Instant::now();
    match loss {
        Loss::FlushAll => {
            let mut conn = redis.connection().await;
            let _: () = redis::cmd("FLUSHALL").query_async(&mut conn).await?;
        }
        Loss::RestartEmpty => redis.restart(),
        Loss::Rollback => redis.restart_from(&snapshot),
    }
    until_filter_answers(&o, filter, Duration::from_secs(3600)).await?;
    let window_s = lost_at.elapsed().as_secs_f64();
    lookups_stop.store(true, Ordering::SeqCst);
    lookups.await?;
    stop.store(true, Ordering::SeqCst);
    writer.await?;
    let _ = std::fs::remove_file(&snapshot);
    // The recovery's rebuild may still be retiring what it replaced: let it end.
    tokio::time::sleep(Duration::from_secs(1)).await;
    Ok(Run { keys, loss, mode, window_s, database_lookups: database_lookups.load(Ordering::SeqCst) })
}

async fn write_steadily(http: reqwest::Client, base: String, filter: String, stop: Arc<AtomicBool>) {
    let gap = Duration::from_secs_f64(1.0 / WRITE_RATE);
    while !stop.load(Ordering::SeqCst) {
        let key = format!("{:032x}{:032x}", rand::random::<u128>(), rand::random::<u128>());
        let _ = http.put(format!("{base}/v1/filters/{filter}/keys/{key}")).bearer_auth(TOKEN).send().await;
        tokio::time::sleep(gap).await;
    }
}

async fn look_up_steadily(
    http: reqwest::Client,
    base: String,
    filter: String,
    stop: Arc<AtomicBool>,
    database: Arc<AtomicU64>,
) {
    let gap = Duration::from_secs_f64(1.0 / LOOKUP_RATE);
    let mut next = Instant::now();
    while !stop.load(Ordering::SeqCst) {
        tokio::time::sleep_until(next.into()).await;
        next += gap;
        let (http, base, filter, database) = (http.clone(), base.clone(), filter.clone(), database.clone());
        tokio::spawn(async move {
            if answered_by(&http, &base, &filter).await.as_deref() == Some("database") {
                database.fetch_add(1, Ordering::Relaxed);
            }
        });
    }
}
