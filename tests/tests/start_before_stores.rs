//! An origin started while its stores are down: it starts, is live, says why it is not ready,
//! never answers "not seen" from nothing, and becomes ready on its own when the stores come up,
//! as pods started during an outage must (rather than crash-looping).
//!
//! # Running
//! `scripts/services start` (Redis on 6399, Cassandra on 9042), then
//! `cargo test -p bloomgate-tests --test start_before_stores`. `scripts/test` does both.
//! "Down" is real: the origin reaches each store through a TCP proxy that drops every
//! connection until it is healed, as a store that is not listening yet would.

use bloomgate_tests::fault_proxy::ChaosProxy;
use bloomgate_tests::origin::{config, TestOrigin};
use bloomgate_tests::{cassandra_addr, random_keys, redis_addr, require, unique_filter};
use reqwest::StatusCode;
use serde_json::Value;
use std::time::{Duration, Instant};

/// How long the origin may take to notice a store that came up: its backoff tops out at 10 s.
const NOTICE_WITHIN: Duration = Duration::from_secs(40);

async fn readiness(origin: &TestOrigin) -> (StatusCode, Value) {
    let r = origin.http.get(format!("{}/readyz", origin.base)).send().await.unwrap();
    (r.status(), r.json().await.unwrap())
}

/// Polls readiness until `done` holds of its body; the last body if it never does.
async fn readiness_until(origin: &TestOrigin, done: impl Fn(&Value) -> bool) -> Result<Value, Value> {
    let deadline = Instant::now() + NOTICE_WITHIN;
    loop {
        let (_, body) = readiness(origin).await;
        if done(&body) {
            return Ok(body);
        }
        if Instant::now() > deadline {
            return Err(body);
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_origin_started_before_its_stores_waits_and_is_ready_once_they_answer() {
    require("Redis", &redis_addr()).await;
    require("Cassandra", &cassandra_addr()).await;
    let (redis, cassandra) = (ChaosProxy::start(&redis_addr()).await, ChaosProxy::start(&cassandra_addr()).await);
    redis.cut();
    cassandra.cut();
    let origin = TestOrigin::start(config(Some(format!("redis://{}/", redis.addr)), &cassandra.addr)).await;

    // Live, not ready, and saying why for each store.
    let live = origin.http.get(format!("{}/healthz", origin.base)).send().await.unwrap();
    assert_eq!(live.status(), StatusCode::OK, "liveness asks nothing of the stores");
    let (status, body) = readiness(&origin).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert!(body["database"].as_str().is_some_and(|why| why.contains("Cassandra")), "{body}");
    assert!(body["filter"].as_str().is_some_and(|why| why != "ok"), "{body}");
    // No store, no answer: a lookup is refused, never "not seen".
    let lookup = origin.get(&unique_filter("waiting"), &random_keys(1)[0]).await;
    assert_eq!(lookup.status(), StatusCode::SERVICE_UNAVAILABLE, "a lookup with no store answered");

    // Cassandra comes up first: ready (the database answers) while Redis is still down.
    cassandra.heal();
    let body = readiness_until(&origin, |b| b["database"] == "ok").await;
    let body = body.unwrap_or_else(|last| panic!("Cassandra came up but the origin never connected: {last}"));
    assert_eq!(body["ready"], true, "{body}");

    // Then Redis: the whole path works, the filter's "no" included.
    redis.heal();
    readiness_until(&origin, |b| b["filter"] == "ok")
        .await
        .unwrap_or_else(|last| panic!("Redis never answered: {last}"));
    let filter = unique_filter("late");
    origin.create_filter(&filter, 10_000, 0.01).await;
    let present = random_keys(20);
    origin.insert_all(&filter, &present).await;
    for key in &present {
        assert_eq!(origin.get(&filter, key).await.status(), StatusCode::OK, "an acknowledged key");
    }
    let mut by_filter = 0;
    for key in random_keys(50) {
        let r = origin.get(&filter, &key).await;
        by_filter +=
            usize::from(r.status() == StatusCode::NOT_FOUND && r.headers()["x-bloomgate-answered-by"] == "filter");
    }
    assert!(by_filter >= 45, "only {by_filter} of 50 absent keys were a 'no' from the filter");
}
