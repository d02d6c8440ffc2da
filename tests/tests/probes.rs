//! The probes mean what load balancers and Kubernetes take them to mean: `/healthz` is the
//! process answering and asks nothing of the stores; `/readyz` is the origin able to answer
//! lookups, which it is while either store answers. With Cassandra paused every "no" still
//! comes from the filter, so the origin stays ready (a readiness probe that removed it would
//! remove every origin exactly when the filter helps most); with Redis gone too, it is not.
//!
//! # Running
//! `scripts/services start`, then `cargo test -p bloomgate-tests --test probes`. Pauses the
//! shared Cassandra (SIGSTOP) for a few seconds.

use bloomgate_tests::origin::{config, TestOrigin};
use bloomgate_tests::procs::{cassandra_pid, Paused};
use bloomgate_tests::redis_server::RedisServer;
use bloomgate_tests::{cassandra_addr, random_keys, redis_addr, require, unique_filter};
use serde_json::Value;
use std::time::{Duration, Instant};

/// `/readyz`'s status and body.
async fn readyz(http: &reqwest::Client, origin: &TestOrigin) -> (u16, Value) {
    let r = http.get(format!("{}/readyz", origin.base)).send().await.unwrap();
    (r.status().as_u16(), r.json().await.unwrap())
}

/// `/readyz` until it answers `status` (within 5 s: its pings wait at most 1 s each).
async fn readyz_becomes(http: &reqwest::Client, origin: &TestOrigin, status: u16) -> Value {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let (now, body) = readyz(http, origin).await;
        if now == status {
            return body;
        }
        assert!(Instant::now() < deadline, "/readyz still {now}, not {status}: {body}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ready_while_either_store_answers_and_alive_whatever_they_do() {
    require("Redis", &redis_addr()).await;
    require("Cassandra", &cassandra_addr()).await;
    let pid = cassandra_pid().expect("Cassandra's pid file (scripts/services start)");
    // A Redis of this test's own, to take away.
    let mut redis = RedisServer::start();
    let origin = TestOrigin::start(config(Some(redis.url()), &cassandra_addr())).await;
    let http = reqwest::Client::builder().timeout(Duration::from_secs(10)).build().unwrap();
    let filter = unique_filter("probes");
    origin.create_filter(&filter, 10_000, 0.01).await;
    origin.insert_all(&filter, &random_keys(100)).await;

    let body = readyz_becomes(&http, &origin, 200).await;
    assert_eq!(body["reason"], "the filter and the database answer", "{body}");

    let paused = Paused::pause(pid);
    let waited = Instant::now();
    let (status, body) = readyz(&http, &origin).await;
    assert_eq!(status, 200, "ready with the database paused: {body}");
    assert!(waited.elapsed() < Duration::from_secs(2), "/readyz took {:?} with Cassandra paused", waited.elapsed());
    assert!(body["reason"].as_str().is_some_and(|r| r.contains("the database does not answer")), "{body}");
    // And it does answer: a key never written is "no" from the filter.
    let absent = &random_keys(1)[0];
    let r = http.get(format!("{}/v1/filters/{filter}/keys/{absent}", origin.base)).send().await.unwrap();
    assert_eq!(r.status(), 404, "a 'no' with the database paused");
    assert_eq!(r.headers()["x-bloomgate-answered-by"], "filter");

    redis.kill();
    let body = readyz_becomes(&http, &origin, 503).await;
    assert_eq!(body["ready"], false, "{body}");
    let r = http.get(format!("{}/healthz", origin.base)).send().await.unwrap();
    assert_eq!(r.status(), 200, "alive with both stores gone: a liveness probe must not restart it");
    drop(paused);

    // Cassandra back (Redis still gone): ready again, every lookup asked of the database.
    let body = readyz_becomes(&http, &origin, 200).await;
    assert!(body["reason"].as_str().is_some_and(|r| r.contains("the filter does not answer")), "{body}");
}
