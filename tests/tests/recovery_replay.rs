//! Recovery from a checkpoint, as an operator meets it: two origins on one Redis and one
//! Cassandra, keys written through one, a checkpoint recorded, more keys written after it, then
//! Redis loses everything (`FLUSHALL`) while a writer keeps writing through the first origin.
//! The filter comes back from the checkpoint and the writes logged since, not from a scan of
//! every key (the origins' `recoveries_total{source="checkpoint"}`), and every key acknowledged
//! before, between and during is answered "seen" through the other origin once the filter
//! answers again. Without the replay (the planted bug `skip-replay`) the keys written after the
//! checkpoint would be answered "not seen": the chaos run's negative control catches that.
//!
//! # Running
//! `scripts/services start` (Cassandra; the test runs a Redis of its own), then
//! `cargo test -p bloomgate-tests --test recovery_replay`. Its keyspace is its own, made afresh
//! on each run and dropped at the end.

use bloomgate_origin::config::Config;
use bloomgate_origin::store::cassandra::CassandraDatabase;
use bloomgate_origin::store::Database;
use bloomgate_tests::origin::{config, TestOrigin};
use bloomgate_tests::redis_server::RedisServer;
use bloomgate_tests::{cassandra_addr, random_keys, require, unique_filter};
use reqwest::StatusCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Long enough for a checkpoint round or a recovery on a busy machine.
const WITHIN: Duration = Duration::from_secs(60);

async fn until<F: std::future::Future<Output = bool>>(what: &str, mut check: impl FnMut() -> F) {
    let deadline = Instant::now() + WITHIN;
    while !check().await {
        assert!(Instant::now() < deadline, "{what}: not within {WITHIN:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_filter_whose_bits_redis_lost_comes_back_from_its_checkpoint_and_the_log() {
    require("Cassandra", &cassandra_addr()).await;
    let redis = RedisServer::start();
    let keyspace = format!("bg_replay_{:08x}", rand::random::<u32>());
    let cfg = Config {
        recovery_interval_ms: 300,
        checkpoint_interval_ms: 1000,
        write_recovery_wait_ms: 2000,
        cassandra_keyspace: keyspace.clone(),
        ..config(Some(redis.url()), &cassandra_addr())
    };
    let (a, b) = (TestOrigin::start(cfg.clone()).await, TestOrigin::start(cfg.clone()).await);
    let mut settings = bloomgate_origin::cassandra_settings(&cfg).unwrap();
    settings.manage_schema = false;
    let operator = CassandraDatabase::connect(&settings).await.unwrap();

    let filter = unique_filter("replay");
    a.create_filter(&filter, 100_000, 0.01).await;
    let before = random_keys(300);
    a.insert_all(&filter, &before).await;
    let written = bloomgate_origin::clock::now_ms();
    until("a checkpoint taken after the first writes", || async {
        operator.checkpoint(&filter).await.unwrap().is_some_and(|c| c.taken_at_ms > written)
    })
    .await;
    let after = random_keys(100);
    a.insert_all(&filter, &after).await;

    // A writer through A, at a bounded rate, through the loss and the recovery.
    let acknowledged = Arc::new(Mutex::new(Vec::<String>::new()));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (http, base, filter) = (a.http.clone(), a.base.clone(), filter.clone());
        let (acknowledged, stop) = (acknowledged.clone(), stop.clone());
        tokio::spawn(async move {
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                let key = random_keys(1).remove(0);
                let url = format!("{base}/v1/filters/{filter}/keys/{key}");
                let r = http.put(url).bearer_auth(bloomgate_tests::origin::TOKEN).send().await;
                if r.is_ok_and(|r| r.status() == StatusCode::CREATED) {
                    acknowledged.lock().unwrap().push(key);
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut conn = redis.connection().await;
    let _: () = redis::cmd("FLUSHALL").query_async(&mut conn).await.unwrap();
    let lost_at = Instant::now();

    let recovered = "bloomgate_recoveries_total{source=\"checkpoint\"}";
    until("a recovery from the checkpoint", || async { a.metric(recovered).await + b.metric(recovered).await >= 1.0 })
        .await;
    let absent = random_keys(1).remove(0);
    until("the filter answering again", || async {
        b.lookup_all(&filter, std::slice::from_ref(&absent)).await[0].1 == "filter"
    })
    .await;
    eprintln!("filter off for {:?} after the FLUSHALL", lost_at.elapsed());
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    writer.await.unwrap();
    let during = acknowledged.lock().unwrap().clone();
    assert!(!during.is_empty(), "no write was acknowledged around the loss: the test proved nothing");

    let scans = "bloomgate_recoveries_total{source=\"scan\"}";
    assert_eq!(a.metric(scans).await + b.metric(scans).await, 0.0, "recovered by a scan, not from the checkpoint");
    for (set, keys) in [("before the checkpoint", &before), ("after it", &after), ("around the loss", &during)] {
        let answers = b.lookup_all(&filter, keys).await;
        let missed: Vec<&String> = keys.iter().zip(&answers).filter(|(_, (seen, _))| !seen).map(|(k, _)| k).collect();
        assert!(
            missed.is_empty(),
            "{} of {} keys acknowledged {set} answered 'not seen': {missed:?}",
            missed.len(),
            keys.len()
        );
    }
    let replayed = a.metric("bloomgate_recovery_replayed_keys_total").await
        + b.metric("bloomgate_recovery_replayed_keys_total").await;
    assert!(
        replayed >= after.len() as f64,
        "replayed {replayed} keys, fewer than the {} written after the checkpoint",
        after.len()
    );
    drop((a, b));
    let session =
        scylla::client::session_builder::SessionBuilder::new().known_node(cassandra_addr()).build().await.unwrap();
    session.query_unpaged(format!("DROP KEYSPACE IF EXISTS {keyspace}"), ()).await.unwrap();
}
