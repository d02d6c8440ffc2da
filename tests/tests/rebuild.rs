//! Keeping the filter true over time, against real Redis and Cassandra: online rebuilds with
//! writers running, deletes dropped by a rebuild, automatic resize, recovery after FLUSHALL,
//! and the lease that lets exactly one origin build.
//!
//! # Running
//! `scripts/services start`, then `cargo test -p bloomgate-tests --test rebuild -- --test-threads 1`
//! (one at a time: the writers of one test would starve the others on a small machine).
//! Tests that turn on automatic recovery use a keyspace of their own, so their origins only
//! ever see their own filters.

use bloomgate_origin::config::Config;
use bloomgate_origin::rebuild::{self, RebuildError};
use bloomgate_tests::origin::{config, TestOrigin};
use bloomgate_tests::redis_server::RedisServer;
use bloomgate_tests::{cassandra_addr, random_keys, redis_addr, require, unique_filter};
use reqwest::StatusCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

async fn services() {
    require("Redis", &redis_addr()).await;
    require("Cassandra", &cassandra_addr()).await;
}

/// Short waits for tests (no settle: writes re-read the state after the database, see
/// `rebuild`; a short grace and lease).
fn fast_rebuilds(mut c: Config) -> Config {
    // Batches of 1000 keys on a busy 2-core machine can take seconds.
    c.request_timeout_ms = 10_000;
    c.redis_write_timeout_ms = 2000;
    c.rebuild_settle_ms = 0;
    c.rebuild_grace_ms = 500;
    c.rebuild_lease_ms = 3_000;
    c
}

/// Keys per second each writer sends: bounded, so the test writes the same on a fast machine
/// and a slow one, and the filter is sized for what it writes.
const WRITER_KEYS_PER_SEC: u64 = 1_000;

fn own_keyspace(mut c: Config) -> Config {
    c.cassandra_keyspace = format!("bg_test_{:x}", rand::random::<u32>());
    c
}

async fn active_generation(origin: &TestOrigin, filter: &str) -> Option<u64> {
    origin.state.gate.filter_store().state(filter).await.ok().and_then(|s| s.active).map(|m| m.generation)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_during_a_rebuild_are_never_lost() {
    services().await;
    let mut cfg = fast_rebuilds(config(Some(format!("redis://{}/", redis_addr())), &cassandra_addr()));
    // A window before the scan, so writes land in every phase of the build.
    cfg.rebuild_settle_ms = 10_000;
    let origin = Arc::new(TestOrigin::start(cfg).await);
    let filter = unique_filter("during");
    origin.create_filter(&filter, 400_000, 0.01).await;
    let before = random_keys(20_000);
    origin.insert_all(&filter, &before).await;
    let first = active_generation(&origin, &filter).await.unwrap();

    // Writers run before, during and after the build; every acknowledged key is recorded.
    let acked = Arc::new(Mutex::new(Vec::<String>::new()));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writers = spawn_writers(&origin, &filter, &acked, &stop);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let started = Instant::now();
    let rebuilding = tokio::spawn(origin.rebuild_now(&filter));
    // Meanwhile the stats show the build's progress.
    let mut snapshots = Vec::new();
    while !rebuilding.is_finished() {
        let progress = origin.stats(&filter).await["rebuild"].clone();
        if !progress.is_null() {
            snapshots.push(progress);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let report = rebuilding.await.unwrap().unwrap();
    let during = acked.lock().unwrap().len();
    assert!(snapshots.iter().all(|p| p["generation"] == report.generation), "progress of another generation");
    assert!(snapshots.iter().any(|p| p["phase"] == "settling"), "no progress shown while the build settled");
    let expected = snapshots[0]["keys_expected"].as_u64().expect("the active generation's keys are expected");
    assert!(expected >= 19_000, "expected {expected} keys, but 20000 were there before the build");
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    for w in writers {
        w.await.unwrap();
    }
    let acked = acked.lock().unwrap().clone();
    eprintln!(
        "rebuild: {} keys scanned in {:.2}s ({:.0} keys/s), {} keys written while it ran ({:.0}s)",
        report.keys,
        report.scan_secs,
        report.keys_per_sec,
        during,
        started.elapsed().as_secs_f64()
    );
    // Two writers at a bounded rate through a build of ≥ 10 s: thousands of keys, on any machine
    // that sustains the rate (20k keys at full rate).
    assert!(during >= 5_000, "only {during} keys were written during the build");
    let scanned: Vec<u64> = snapshots.iter().filter_map(|p| p["keys_scanned"].as_u64()).collect();
    assert!(scanned.windows(2).all(|w| w[0] <= w[1]), "keys scanned went backwards: {scanned:?}");
    assert!(scanned.last().is_some_and(|n| *n <= report.keys));
    assert_ne!(active_generation(&origin, &filter).await, Some(first), "the rebuild did not switch");

    // Past the metadata cache: lookups read the new generation. Every acknowledged key is seen.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let all: Vec<String> = before.into_iter().chain(acked).collect();
    let answers = origin.lookup_all(&filter, &all).await;
    let missed = answers.iter().filter(|(seen, _)| !seen).count();
    assert_eq!(missed, 0, "{missed} of {} acknowledged keys answered 'not seen' after the switch", all.len());
    // And the new generation answers "no" for strangers.
    let absent = origin.lookup_all(&filter, &random_keys(2000)).await;
    assert!(absent.iter().filter(|(_, by)| by == "filter").count() >= 1900);
}

/// Two writers sending a batch every 100 ms until `stop` is set, each recording in `acked` the
/// keys of every batch the origin acknowledged (a refused batch is what a client retries).
fn spawn_writers(
    origin: &Arc<TestOrigin>,
    filter: &str,
    acked: &Arc<Mutex<Vec<String>>>,
    stop: &Arc<std::sync::atomic::AtomicBool>,
) -> Vec<tokio::task::JoinHandle<()>> {
    (0..2)
        .map(|_| {
            let (origin, filter, acked, stop) = (origin.clone(), filter.to_owned(), acked.clone(), stop.clone());
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(Duration::from_millis(100));
                while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                    tick.tick().await;
                    let batch = random_keys((WRITER_KEYS_PER_SEC / 10) as usize);
                    let r = origin
                        .http
                        .post(format!("{}/v1/filters/{filter}/keys", origin.base))
                        .bearer_auth(bloomgate_tests::origin::TOKEN)
                        .json(&serde_json::json!({ "keys": batch }))
                        .send()
                        .await
                        .unwrap();
                    // Only acknowledged keys count; a refused batch is what a client retries.
                    if r.status() == StatusCode::OK {
                        acked.lock().unwrap().extend(batch);
                    }
                }
            })
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rebuild_drops_the_bits_of_deleted_keys() {
    services().await;
    let cfg = || fast_rebuilds(config(Some(format!("redis://{}/", redis_addr())), &cassandra_addr()));
    let origin = TestOrigin::start(cfg()).await;
    let other = TestOrigin::start(cfg()).await;
    let filter = unique_filter("deletes");
    origin.create_filter(&filter, 20_000, 0.01).await;
    let keys = random_keys(10_000);
    origin.insert_all(&filter, &keys).await;
    let (deleted, kept) = keys.split_at(8_000);
    // Deletes through two origins: the count since the build is shared, not per process.
    for (i, key) in deleted[..2_000].iter().enumerate() {
        let through = if i % 2 == 0 { &origin } else { &other };
        assert_eq!(through.delete(&filter, key).await.status(), StatusCode::OK);
    }
    let stale = &deleted[..2_000];
    let answers = origin.lookup_all(&filter, stale).await;
    assert!(answers.iter().all(|(seen, by)| !seen && by == "database"), "deleted keys still pass the filter");
    assert_eq!(origin.stats(&filter).await["deletes_since_build"], 2000);
    assert_eq!(other.stats(&filter).await["deletes_since_build"], 2000);

    origin.rebuild_now(&filter).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let answers = origin.lookup_all(&filter, stale).await;
    let through = answers.iter().filter(|(_, by)| by == "database").count();
    assert!(through <= 60, "{through} of 2000 deleted keys still reach the database after the rebuild");
    assert_eq!(origin.stats(&filter).await["deletes_since_build"], 0, "a new generation starts with no stale keys");
    assert!(origin.lookup_all(&filter, kept).await.iter().all(|(seen, _)| *seen));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_overfull_filter_is_resized_automatically() {
    services().await;
    let mut cfg = own_keyspace(fast_rebuilds(config(Some(format!("redis://{}/", redis_addr())), &cassandra_addr())));
    cfg.recovery_interval_ms = 500;
    let origin = TestOrigin::start(cfg).await;
    let filter = unique_filter("overfull");
    origin.create_filter(&filter, 2_000, 0.01).await;
    // Before the inserts: a quick recovery check may resize while they are still arriving.
    let first = active_generation(&origin, &filter).await.unwrap();
    let keys = random_keys(8_000);
    origin.insert_all(&filter, &keys).await;

    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let stats = origin.stats(&filter).await;
        // Resized (maybe in more than one step, if a check ran while keys were still arriving)
        // and settled: a new generation, no build under way, sized for the keys it holds. A
        // check that ran mid-insert may have sized for fewer than all 8000 keys (twice what
        // it saw); the filter is settled once the checker would not resize it again.
        let resize_at = origin.state.config.auto_resize_at_fill;
        let settled = stats["generation"].as_u64() != Some(first)
            && stats["building_generation"].is_null()
            && stats["capacity"].as_f64().unwrap_or(0.0) * resize_at >= 8_000.0
            && stats["expected_fp_rate_now"].as_f64().is_some_and(|p| p <= 0.01);
        if settled {
            break;
        }
        assert!(Instant::now() < deadline, "no automatic resize within 60 s: {stats}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(origin.lookup_all(&filter, &keys).await.iter().all(|(seen, _)| *seen));
    eprintln!("after resize: {}", origin.stats(&filter).await);
    let absent = origin.lookup_all(&filter, &random_keys(5_000)).await;
    let fp = absent.iter().filter(|(_, by)| by == "database").count() as f64 / 5_000.0;
    let text = origin.http.get(format!("{}/metrics", origin.base)).send().await.unwrap().text().await.unwrap();
    assert!(
        fp <= 0.01,
        "false-positive rate {fp} after the resize; {}",
        text.lines().filter(|l| l.contains("fallthrough")).collect::<Vec<_>>().join(" ")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flushall_mid_traffic_stays_correct_and_recovers_on_its_own() {
    services().await;
    let redis = RedisServer::start();
    let mut cfg = own_keyspace(fast_rebuilds(config(Some(redis.url()), &cassandra_addr())));
    cfg.recovery_interval_ms = 500;
    let origin = Arc::new(TestOrigin::start(cfg).await);
    let filter = unique_filter("flushed");
    origin.create_filter(&filter, 20_000, 0.01).await;
    let present = random_keys(3_000);
    origin.insert_all(&filter, &present).await;
    let absent = random_keys(1_000);

    let mut conn = redis.connection().await;
    let _: () = redis::cmd("FLUSHALL").query_async(&mut conn).await.unwrap();
    let flushed_at = Instant::now();
    // Correct answers all the way through: while the filter is gone, while it is rebuilt,
    // and after.
    let mut recovered_after = None;
    while flushed_at.elapsed() < Duration::from_secs(60) {
        let answers = origin.lookup_all(&filter, &present[..500]).await;
        assert!(answers.iter().all(|(seen, _)| *seen), "false negative during recovery");
        let answers = origin.lookup_all(&filter, &absent).await;
        assert!(answers.iter().all(|(seen, _)| !seen));
        if answers.iter().filter(|(_, by)| by == "filter").count() >= 950 {
            recovered_after = Some(flushed_at.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let recovered_after = recovered_after.expect("filter negatives did not resume within 60 s of FLUSHALL");
    eprintln!("recovered {recovered_after:?} after FLUSHALL");
    assert!(origin.lookup_all(&filter, &present).await.iter().all(|(seen, _)| *seen));
    // Writes work again too.
    assert_eq!(origin.put(&filter, &random_keys(1)[0]).await.status(), StatusCode::CREATED);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_origins_racing_to_rebuild_build_once() {
    services().await;
    let cfg = || fast_rebuilds(config(Some(format!("redis://{}/", redis_addr())), &cassandra_addr()));
    let a = TestOrigin::start(cfg()).await;
    let b = TestOrigin::start(cfg()).await;
    let filter = unique_filter("race");
    a.create_filter(&filter, 10_000, 0.01).await;
    a.insert_all(&filter, &random_keys(1_000)).await;
    let start = |o: &TestOrigin| {
        let gate = o.state.gate.clone();
        let (filter, options) = (filter.clone(), rebuild::RebuildOptions::from_config(&o.state.config, false));
        async move { rebuild::start(gate.filter_store().clone(), gate.database().clone(), filter, options).await }
    };
    let (ra, rb) = tokio::join!(start(&a), start(&b));
    let started: Vec<_> = [ra, rb]
        .into_iter()
        .filter_map(|r| match r {
            Ok(task) => Some(task),
            Err(RebuildError::Busy) => None,
            Err(e) => panic!("unexpected: {e}"),
        })
        .collect();
    assert_eq!(started.len(), 1, "exactly one origin may build");
    for task in started {
        task.await.unwrap().unwrap();
    }
    // Over HTTP too: a second rebuild while one runs is 409.
    let http = reqwest::Client::new();
    let url = |o: &TestOrigin| format!("{}/v1/filters/{filter}/rebuild", o.base);
    let first = http.post(url(&a)).bearer_auth(bloomgate_tests::origin::TOKEN).send().await.unwrap();
    assert_eq!(first.status(), StatusCode::ACCEPTED);
    let second = http.post(url(&b)).bearer_auth(bloomgate_tests::origin::TOKEN).send().await.unwrap();
    assert_eq!(second.status(), StatusCode::CONFLICT);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rebuild_in_runs_is_shared_with_another_origin_and_loses_no_key() {
    services().await;
    // Runs of two segments of 4 KiB: the filter below spans about 30 segments.
    let cfg = || {
        let mut c = fast_rebuilds(config(Some(format!("redis://{}/", redis_addr())), &cassandra_addr()));
        c.rebuild_memory_bytes = 8 * 1024;
        c
    };
    let (a, b) = (TestOrigin::start(cfg()).await, TestOrigin::start(cfg()).await);
    let filter = unique_filter("shared");
    let create = serde_json::json!({ "capacity": 100_000, "fp_rate": 0.01, "segment_bytes": 4096 });
    let created = reqwest::Client::new()
        .put(format!("{}/v1/filters/{filter}", a.base))
        .bearer_auth(bloomgate_tests::origin::TOKEN)
        .json(&create)
        .send()
        .await
        .unwrap();
    assert!(created.status().is_success(), "{}", created.text().await.unwrap());
    let before = random_keys(3_000);
    a.insert_all(&filter, &before).await;

    let gate = a.state.gate.clone();
    let options = rebuild::RebuildOptions::from_config(&a.state.config, false);
    let rebuilding =
        rebuild::start(gate.filter_store().clone(), gate.database().clone(), filter.clone(), options).await.unwrap();
    // B helps as its recovery check would, and writes go through B meanwhile, at a bounded rate.
    let b_options = rebuild::RebuildOptions::from_config(&b.state.config, false);
    let (mut helped, mut during) = (0u64, Vec::new());
    while !rebuilding.is_finished() {
        if b.state.gate.help_rebuild(&filter, &b_options).await.unwrap().is_some() {
            helped += 1;
        }
        let key = random_keys(1).remove(0);
        assert_eq!(b.put(&filter, &key).await.status(), StatusCode::CREATED);
        during.push(key);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let report = rebuilding.await.unwrap().unwrap();
    assert!(report.scans >= 10, "the rebuild must be built in many runs: {}", report.scans);
    assert!(helped >= 1, "the other origin built no run of {}", report.scans);
    // A run a slow helper still built after its claim expired may be built again here, and is
    // then counted here: never more runs elsewhere than were helped.
    assert!(
        (1..=helped).contains(&(report.scans_elsewhere as u64)),
        "the rebuild counts the runs built elsewhere: {} of {helped} helped",
        report.scans_elsewhere
    );
    assert_eq!(b.metric("bloomgate_rebuild_runs_helped_total").await, helped as f64);
    assert_eq!(active_generation(&a, &filter).await, Some(report.generation));
    // Read through the origin that did not switch, and through the one that did.
    for (origin, keys) in [(&a, &during), (&b, &before), (&a, &before)] {
        let answers = origin.lookup_all(&filter, keys).await;
        let missed = answers.iter().filter(|(seen, _)| !seen).count();
        assert_eq!(missed, 0, "{missed} of {} acknowledged keys not seen after a shared rebuild", keys.len());
    }
}
