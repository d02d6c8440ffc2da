//! Harness for bloomgate's end-to-end tests, and for the tools that measure and break it
//! (`tools/chaos`, `tools/bench`): real services, started by `scripts/services`, plus what a
//! test needs to break them on purpose: a private `redis-server` it may kill, a TCP proxy that
//! can delay or cut a connection (a real network failure, not a mock), and raw HTTP requests
//! for paths an HTTP client would normalise.
//!
//! Service addresses come from the environment with local defaults:
//! `BG_TEST_REDIS` (127.0.0.1:6399), `BG_TEST_CASSANDRA` (127.0.0.1:9042).
//! A service that cannot be reached fails the test with the command that starts it.
//!
//! # Layout
//! - this file: service addresses, reachability, free ports, waiting for a server, test keys.
//! - [`origin`]: an origin served in-process on the test services (or on the embedded stores,
//!   as in the quick start), with an API client.
//! - [`edge`]: `wrangler dev` running the built edge worker, and an origin-proxy-edge stack.
//! - [`edge_load`]: a bounded lookup load on the edge, with its `workerd`s' memory sampled.
//! - [`faketime`]: a process whose wall clock is off from the machine's (Debian's libfaketime).
//! - [`fault_proxy`]: a TCP proxy that delays, cuts or corrupts a connection.
//! - [`redis_server`]: a private `redis-server` a test may kill, restart or roll back.
//! - [`redis_cluster`]: the shared Redis Cluster's nodes, and bringing killed ones back.
//! - [`race`]: writes through one origin read at once through another, under change.
//! - [`raw_http`]: HTTP/1.1 requests written byte for byte.
//! - [`tls_front`]: a TLS terminator with a CA of its own, in front of a plain-HTTP origin.
//! - [`tls_services`]: the TLS Redis, Redis Cluster and Cassandra of `scripts/services start --tls`.
//! - [`procs`]: the machine's processes from `/proc`, and signals to the ones started here.
#![forbid(unsafe_code)]

pub mod edge;
pub mod edge_load;
pub mod faketime;
pub mod fault_proxy;
pub mod origin;
pub mod procs;
pub mod race;
pub mod raw_http;
pub mod redis_cluster;
pub mod redis_server;
pub mod tls_front;
pub mod tls_services;

use std::path::PathBuf;
use std::time::Duration;

/// A port on 127.0.0.1 that was free a moment ago (the OS picked it).
pub fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// Polls `url` every `every` until it answers 2xx; false if it has not within `within`.
pub async fn wait_until_ok(http: &reqwest::Client, url: &str, within: Duration, every: Duration) -> bool {
    let deadline = std::time::Instant::now() + within;
    loop {
        if let Ok(r) = http.get(url).send().await {
            if r.status().is_success() {
                return true;
            }
        }
        if std::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(every).await;
    }
}

/// The checkout this harness was built from (its `scripts/`, `edge/`, `.state/`).
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().expect("tests/ sits in the checkout").to_path_buf()
}

/// The shared Redis started by `scripts/services`.
pub fn redis_addr() -> String {
    std::env::var("BG_TEST_REDIS").unwrap_or_else(|_| "127.0.0.1:6399".into())
}

/// A connection to the shared Redis, for what a test does to it behind the origins' backs.
pub async fn redis_connection() -> redis::aio::MultiplexedConnection {
    let client = redis::Client::open(format!("redis://{}/", redis_addr())).expect("the test Redis's URL");
    client.get_multiplexed_async_connection().await.expect("the test Redis answers")
}

/// The shared Redis's clock (`TIME`), ms since the Unix epoch.
pub async fn redis_now_ms(redis: &mut redis::aio::MultiplexedConnection) -> u64 {
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query_async(redis).await.expect("Redis's TIME");
    secs * 1000 + micros / 1000
}

/// The Cassandra started by `scripts/services`.
pub fn cassandra_addr() -> String {
    std::env::var("BG_TEST_CASSANDRA").unwrap_or_else(|_| "127.0.0.1:9042".into())
}

/// Panics with instructions unless `addr` accepts TCP connections.
pub async fn require(service: &str, addr: &str) {
    let reachable = tokio::time::timeout(Duration::from_secs(3), tokio::net::TcpStream::connect(addr)).await;
    if !matches!(reachable, Ok(Ok(_))) {
        panic!("{service} is not reachable at {addr}: start it with `scripts/services start` (or set BG_TEST_* to its address)");
    }
}

/// A random filter name, so tests sharing one Cassandra never see each other's keys.
pub fn unique_filter(prefix: &str) -> String {
    format!("{prefix}-{:016x}", rand::random::<u64>())
}

/// `n` random SHA-256-shaped hex keys.
pub fn random_keys(n: usize) -> Vec<String> {
    (0..n).map(|_| (0..4).map(|_| format!("{:016x}", rand::random::<u64>())).collect()).collect()
}
