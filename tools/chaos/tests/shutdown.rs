//! SIGTERM while requests are in flight, as Kubernetes sends it when it deletes a pod: the
//! origin stops accepting connections at once, and every request it had admitted still gets
//! its answer; what it acknowledged is stored.
//!
//! The requests are kept in flight by Cassandra, paused (SIGSTOP) while they wait for it, so the
//! test does not depend on how fast the machine answers: the signal is sent only once the
//! origin's own gauge shows them all in flight.
//!
//! # Running
//! `scripts/services start`, then `cargo test -p bloomgate-chaos --test shutdown`. Pauses the
//! shared Cassandra for about a second.

use bloomgate_chaos::origin_metrics::metric;
use bloomgate_chaos::origin_process::{origin_toml, Origin, OriginRedis, OriginTuning};
use bloomgate_tests::origin::{TestOrigin, TOKEN};
use bloomgate_tests::procs::{cassandra_pid, signal, Paused};
use bloomgate_tests::{cassandra_addr, random_keys, redis_addr, require, unique_filter};
use std::time::{Duration, Instant};

/// Writes in flight when the signal comes.
const IN_FLIGHT: usize = 8;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_answers_every_admitted_request_and_accepts_no_more() {
    require("Redis", &redis_addr()).await;
    require("Cassandra", &cassandra_addr()).await;
    let cassandra = cassandra_pid().expect("Cassandra's pid file (scripts/services start)");
    let dir = std::env::temp_dir().join(format!("bloomgate-shutdown-{:016x}", rand::random::<u64>()));
    std::fs::create_dir_all(&dir).unwrap();
    let port = free_port();
    let toml = origin_toml(
        port,
        OriginRedis::Single(&redis_addr()),
        &cassandra_addr(),
        "bloomgate_test",
        &OriginTuning::default(),
    );
    let config = dir.join("origin.toml");
    std::fs::write(&config, toml).unwrap();
    let exe = env!("CARGO_BIN_EXE_bloomgate-chaos").into();
    let origin = Origin::new(0, port, exe, config, dir.join("origin.log"), None);
    let http = reqwest::Client::new();
    origin.start(&http).await.expect("origin started");
    let pid = origin.pid().unwrap();
    let client = bloomgate_client::Client::builder(&origin.base).token(TOKEN).build().unwrap();
    let filter = unique_filter("shutdown");
    client.create_filter(&filter, &bloomgate_client::api::CreateFilter::new(10_000, 0.01)).await.unwrap();

    // Writes that wait for the paused Cassandra, each on a connection of its own.
    let paused = Paused::pause(cassandra);
    let keys = random_keys(IN_FLIGHT);
    let writes = writes_all_in_flight(&origin, &http, &filter, &keys).await;

    assert!(signal(pid, "TERM"), "SIGTERM sent to the origin");
    // It stops accepting at once (the listener is closed), while the writes still wait.
    let deadline = Instant::now() + Duration::from_secs(5);
    let fresh = reqwest::Client::builder().pool_max_idle_per_host(0).timeout(Duration::from_secs(1)).build().unwrap();
    while fresh.get(format!("{}/healthz", origin.base)).send().await.is_ok() {
        assert!(Instant::now() < deadline, "still accepting connections 5 s after SIGTERM");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drop(paused);

    let mut acknowledged = Vec::new();
    for (key, write) in keys.iter().zip(writes) {
        match write.await.unwrap() {
            Ok(201) => acknowledged.push(key.clone()),
            // Cassandra's timeout may pass while it is paused: an answer all the same.
            Ok(503) => {}
            Ok(other) => panic!("a write in flight at SIGTERM answered {other}"),
            Err(e) => panic!("a write in flight at SIGTERM got no answer: {e}"),
        }
    }
    let exited = Instant::now() + Duration::from_secs(10);
    while std::path::Path::new(&format!("/proc/{pid}/status")).exists()
        && !std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default().contains("zombie")
    {
        assert!(Instant::now() < exited, "the origin did not exit within 10 s of its last answer");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    origin.stop();

    // What it acknowledged is stored: another origin sees every such key.
    let other = TestOrigin::on_services(|_| {}).await;
    for key in &acknowledged {
        assert_eq!(other.get(&filter, key).await.status(), 200, "acknowledged before SIGTERM, then not seen");
    }
    println!("{} of {IN_FLIGHT} writes in flight at SIGTERM acknowledged, the rest 503", acknowledged.len());
    let _ = std::fs::remove_dir_all(&dir);
}

/// A PUT of each key, each on a connection of its own, returned once the origin's own gauge
/// shows them all in flight: the signal must come while every one of them is admitted.
async fn writes_all_in_flight(
    origin: &Origin,
    http: &reqwest::Client,
    filter: &str,
    keys: &[String],
) -> Vec<tokio::task::JoinHandle<Result<u16, String>>> {
    let writes: Vec<_> = keys
        .iter()
        .map(|key| {
            let url = format!("{}/v1/filters/{filter}/keys/{key}", origin.base);
            tokio::spawn(async move {
                let http = reqwest::Client::builder().pool_max_idle_per_host(0).build().unwrap();
                http.put(url).bearer_auth(TOKEN).send().await.map(|r| r.status().as_u16()).map_err(|e| e.to_string())
            })
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let text = http.get(format!("{}/metrics", origin.base)).send().await.unwrap().text().await.unwrap();
        // The scrape itself is in flight too.
        if metric(&text, "bloomgate_http_in_flight", &[]).unwrap_or(0.0) >= (IN_FLIGHT + 1) as f64 {
            break;
        }
        assert!(Instant::now() < deadline, "the writes were not all in flight within 10 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    writes
}
