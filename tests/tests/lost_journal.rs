//! A generation's insert journal lost (evicted, deleted) while its segments stay: no write to
//! the generation can be acknowledged (an add must append to it, and it is never re-created),
//! so the recovery check, which finds the journal gone beside the segments, rebuilds the filter
//! into a new generation, and writes go on there instead of being refused for good.
//!
//! # Running
//! `scripts/services start` (Cassandra; the test runs a Redis of its own), then
//! `cargo test -p bloomgate-tests --test lost_journal`.

use bloomgate_tests::origin::{config, TestOrigin, TOKEN};
use bloomgate_tests::redis_server::RedisServer;
use bloomgate_tests::{cassandra_addr, random_keys, require, unique_filter};
use reqwest::StatusCode;
use std::time::{Duration, Instant};

/// The filter's active generation, from its stats.
async fn generation(origin: &TestOrigin, filter: &str) -> Option<u64> {
    let url = format!("{}/v1/filters/{filter}/stats", origin.base);
    let r = origin.http.get(url).bearer_auth(TOKEN).send().await.ok()?;
    r.json::<serde_json::Value>().await.ok()?["generation"].as_u64()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_journal_is_rebuilt_and_writes_go_on() {
    require("Cassandra", &cassandra_addr()).await;
    let redis = RedisServer::start();
    let origin = TestOrigin::start(bloomgate_origin::config::Config {
        recovery_interval_ms: 300,
        write_recovery_wait_ms: 500,
        cassandra_keyspace: format!("bg_test_{:x}", rand::random::<u32>()),
        ..config(Some(redis.url()), &cassandra_addr())
    })
    .await;
    let filter = unique_filter("journal-lost");
    origin.create_filter(&filter, 10_000, 0.01).await;
    let before = random_keys(200);
    origin.insert_all(&filter, &before).await;
    let first = generation(&origin, &filter).await.expect("a generation");

    let mut conn = redis.connection().await;
    let deleted: u32 =
        redis::cmd("DEL").arg(format!("bg:{{{filter}}}:jnl:{first}")).query_async(&mut conn).await.unwrap();
    assert_eq!(deleted, 1, "the generation keeps an insert journal: the test would prove nothing");

    // Writes are refused (503, never acknowledged) until a new generation takes them.
    let deadline = Instant::now() + Duration::from_secs(60);
    let key = random_keys(1).remove(0);
    loop {
        match origin.put(&filter, &key).await.status() {
            StatusCode::CREATED => break,
            StatusCode::SERVICE_UNAVAILABLE => {}
            other => panic!("a write to a filter whose journal is lost answered {other}"),
        }
        assert!(Instant::now() < deadline, "writes still refused a minute after the journal was lost");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let second = generation(&origin, &filter).await.expect("a generation");
    assert_ne!(second, first, "the write was acknowledged only once a rebuild named a new generation");
    // Nothing acknowledged was lost on the way, and the filter answers again.
    for (seen, key) in origin.lookup_all(&filter, &[before, vec![key]].concat()).await {
        assert!(seen, "{key} acknowledged, then answered 'not seen'");
    }
}
