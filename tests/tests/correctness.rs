//! The one promise under change: a key whose write was acknowledged is never answered "not
//! seen" — through rebuilds on other origins, a rebuild that dies, a Redis that goes back in
//! time, lost keys, and in the embedded quick start; plus the limits that keep a bad request
//! or a slow client from taking the origin down.
//!
//! # Running
//! `scripts/services start`, then
//! `cargo test -p bloomgate-tests --test correctness -- --test-threads 1`.
//! Several origins share one Redis and one Cassandra, as in production; writers run at a
//! bounded rate so the same test holds on a quiet machine and a busy one. Tests that turn on
//! automatic recovery use a keyspace of their own (`BG_TEST_REDIS`,
//! `BG_TEST_CASSANDRA` name the services).

use bloomgate_origin::config::Config;
use bloomgate_origin::rebuild;
use bloomgate_tests::origin::{config, TestOrigin, TOKEN};
use bloomgate_tests::race::{Race, RaceResult};
use bloomgate_tests::redis_server::RedisServer;
use bloomgate_tests::{cassandra_addr, random_keys, redis_addr, require, unique_filter};
use reqwest::StatusCode;
use serde_json::Value;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

async fn services() {
    require("Redis", &redis_addr()).await;
    require("Cassandra", &cassandra_addr()).await;
}

/// Production-like caching (the default 1 s metadata cache) with short rebuild timings.
fn adversarial(mut c: Config) -> Config {
    c.meta_cache_ms = Config::default().meta_cache_ms;
    c.request_timeout_ms = 10_000;
    c.redis_write_timeout_ms = 2_000;
    c.rebuild_settle_ms = 0;
    c.rebuild_grace_ms = 2_000;
    c.rebuild_lease_ms = 3_000;
    c
}

fn own_keyspace(mut c: Config, keyspace: &str) -> Config {
    c.cassandra_keyspace = keyspace.to_owned();
    c
}

fn keyspace() -> String {
    format!("bg_test_{:x}", rand::random::<u32>())
}

fn shared_redis() -> Option<String> {
    Some(format!("redis://{}/", redis_addr()))
}

/// Lookups of keys never written, one every 10 ms round robin over `origins`, until finished;
/// each must be "not seen" (404), as a lookup of an absent key is.
struct AbsentLookups {
    stop: Arc<std::sync::atomic::AtomicBool>,
    task: tokio::task::JoinHandle<u64>,
}

fn absent_lookups(origins: Vec<Arc<TestOrigin>>, filter: &str) -> AbsentLookups {
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (filter, stopped) = (filter.to_owned(), stop.clone());
    let task = tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_millis(10));
        let mut n = 0u64;
        while !stopped.load(std::sync::atomic::Ordering::SeqCst) {
            tick.tick().await;
            let origin = &origins[n as usize % origins.len()];
            let status = origin.get(&filter, &random_keys(1)[0]).await.status();
            assert!(matches!(status, StatusCode::NOT_FOUND | StatusCode::SERVICE_UNAVAILABLE), "{status}");
            n += 1;
        }
        n
    });
    AbsentLookups { stop, task }
}

impl AbsentLookups {
    async fn finish(self) -> u64 {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        self.task.await.expect("absent-key reader panicked")
    }
}

async fn stats(origin: &TestOrigin, filter: &str) -> Value {
    let r =
        origin.http.get(format!("{}/v1/filters/{filter}/stats", origin.base)).bearer_auth(TOKEN).send().await.unwrap();
    if r.status() != StatusCode::OK {
        return Value::Null;
    }
    r.json().await.unwrap_or(Value::Null)
}

/// Polls `check` every 200 ms until it returns a value; panics with `what` after `limit`.
async fn wait_for<T, F, Fut>(what: &str, limit: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + limit;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(Instant::now() < deadline, "timed out after {limit:?} waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Waits until a rebuild started after `generation` has switched and nothing is building.
async fn wait_for_switch(origin: &TestOrigin, filter: &str, generation: u64, limit: Duration) -> u64 {
    wait_for("a rebuild's switch", limit, || async {
        let s = stats(origin, filter).await;
        let now = s["generation"].as_u64()?;
        (now != generation && s["building_generation"].is_null()).then_some(now)
    })
    .await
}

fn assert_clean(result: &RaceResult, min_acked: usize) {
    assert!(
        result.false_negatives.is_empty(),
        "{} of {} acknowledged keys were answered 'not seen' right after their write; first: {:?}",
        result.false_negatives.len(),
        result.acked.len(),
        &result.false_negatives[..result.false_negatives.len().min(5)]
    );
    assert!(
        result.unexpected.is_empty(),
        "unexpected answers: {:?}",
        &result.unexpected[..result.unexpected.len().min(5)]
    );
    assert!(result.acked.len() >= min_acked, "only {} writes were acknowledged: {result:?}", result.acked.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_written_through_one_origin_is_seen_at_once_through_another_across_rebuilds() {
    services().await;
    let origins: Vec<Arc<TestOrigin>> = {
        let mut v = Vec::new();
        for _ in 0..3 {
            v.push(Arc::new(TestOrigin::start(adversarial(config(shared_redis(), &cassandra_addr()))).await));
        }
        v
    };
    let filter = unique_filter("race");
    origins[0].create_filter(&filter, 20_000, 0.01).await;
    origins[0].insert_all(&filter, &random_keys(2_000)).await;
    // Four writers, one key each every 25 ms: 160 writes/s, each read back at once elsewhere.
    let race = Race::start(origins.clone(), &filter, 4, Duration::from_millis(25));
    // Meanwhile, lookups of keys never written: the "no"s the origins' copies answer from memory
    // under their read leases, so the race runs with leases live (counted below).
    let absent = absent_lookups(origins.clone(), &filter);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut generation = stats(&origins[0], &filter).await["generation"].as_u64().unwrap();
    // Three switches from three origins, one of them a resize; the readers' metadata caches
    // (1 s) outlive each switch, and writes through the others follow the new state at once.
    for (i, body) in [None, Some(serde_json::json!({"capacity": 40_000})), None].into_iter().enumerate() {
        let origin = &origins[i];
        let mut request = origin.http.post(format!("{}/v1/filters/{filter}/rebuild", origin.base)).bearer_auth(TOKEN);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let r = request.send().await.unwrap();
        assert_eq!(r.status(), StatusCode::ACCEPTED, "rebuild on origin {i}: {}", r.text().await.unwrap());
        generation = wait_for_switch(origin, &filter, generation, Duration::from_secs(60)).await;
        // Past the grace period, so the replaced generation is retired under the readers too.
        tokio::time::sleep(Duration::from_millis(2_500)).await;
    }
    let result = race.finish().await;
    let absent = absent.finish().await;
    eprintln!(
        "race: {} acknowledged, {} read back at once, {} refused, {} read errors; {absent} lookups of keys never written",
        result.acked.len(),
        result.reads,
        result.refused,
        result.read_errors
    );
    assert_clean(&result, 300);
    // The origins answered "no" from memory under read leases while the race ran (a run where
    // no lease ever held would prove nothing about them).
    let mut under_lease = 0.0;
    for origin in &origins {
        under_lease += origin.metric("bloomgate_filter_reads_total{via=\"lease\"}").await;
    }
    eprintln!("race: {under_lease} lookups answered \"no\" under a read lease");
    assert!(
        under_lease >= absent as f64 / 4.0,
        "only {under_lease} of {absent} absent-key lookups answered under a lease"
    );
    // The read-backs went through the origins' local copies (behind their read barriers), not
    // around them: lookups fall back to Redis only while a new generation's copy loads.
    let mut through_copies = 0.0;
    for origin in &origins {
        through_copies += origin.metric("bloomgate_local_copy_lookups_total{outcome=\"answered\"}").await;
    }
    assert!(
        through_copies >= result.reads as f64 / 2.0,
        "only {through_copies} lookups were answered by local copies, of {} read-backs",
        result.reads
    );
    // And later, from every origin: every acknowledged key is seen.
    for origin in &origins {
        let answers = origin.lookup_all(&filter, &result.acked).await;
        assert!(answers.iter().all(|(seen, _)| *seen), "an acknowledged key is 'not seen' after the rebuilds");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rebuild_that_dies_loses_nothing_and_another_origin_takes_over() {
    services().await;
    let ks = keyspace();
    let mut a_cfg = own_keyspace(adversarial(config(shared_redis(), &cassandra_addr())), &ks);
    a_cfg.rebuild_settle_ms = 60_000; // it dies while settling, with its generation named
    let a = Arc::new(TestOrigin::start(a_cfg).await);
    let mut b_cfg = own_keyspace(adversarial(config(shared_redis(), &cassandra_addr())), &ks);
    b_cfg.recovery_interval_ms = 300;
    let b = Arc::new(TestOrigin::start(b_cfg).await);
    let filter = unique_filter("dies");
    a.create_filter(&filter, 20_000, 0.01).await;
    a.insert_all(&filter, &random_keys(1_000)).await;
    let first = stats(&a, &filter).await["generation"].as_u64().unwrap();

    let race = Race::start(vec![a.clone(), b.clone()], &filter, 2, Duration::from_millis(25));
    let gate = a.state.gate.clone();
    let task = rebuild::start(
        gate.filter_store().clone(),
        gate.database().clone(),
        filter.clone(),
        rebuild::RebuildOptions::from_config(&a.state.config, false),
    )
    .await
    .unwrap();
    let dead = wait_for("the rebuild to name its generation", Duration::from_secs(10), || async {
        stats(&a, &filter).await["building_generation"].as_u64()
    })
    .await;
    // The origin dies mid-build: no cleanup, the lease is left to expire.
    task.abort();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(stats(&b, &filter).await["building_generation"], dead, "the dead rebuild's generation is still named");
    let taken_over_at = Instant::now();
    let now = wait_for_switch(&b, &filter, first, Duration::from_secs(60)).await;
    eprintln!("recovery took over {:?} after the rebuild died", taken_over_at.elapsed());
    assert_ne!(now, dead, "the abandoned generation was never completed, so never switched to");
    tokio::time::sleep(Duration::from_secs(1)).await;
    let result = race.finish().await;
    assert_clean(&result, 100);
    for origin in [&a, &b] {
        assert!(origin.lookup_all(&filter, &result.acked).await.iter().all(|(seen, _)| *seen));
    }
    let absent = b.lookup_all(&filter, &random_keys(1_000)).await;
    assert!(absent.iter().filter(|(_, by)| by == "filter").count() >= 950, "the new generation answers 'no' again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_that_goes_back_in_time_is_never_read_and_the_filter_is_rebuilt() {
    services().await;
    let mut redis = RedisServer::start();
    let ks = keyspace();
    let a = TestOrigin::start(own_keyspace(adversarial(config(Some(redis.url()), &cassandra_addr())), &ks)).await;
    let mut b_cfg = own_keyspace(adversarial(config(Some(redis.url()), &cassandra_addr())), &ks);
    b_cfg.recovery_interval_ms = 300;
    let b = TestOrigin::start(b_cfg).await;
    let filter = unique_filter("rollback");
    a.create_filter(&filter, 20_000, 0.01).await;
    let before = random_keys(1_000);
    a.insert_all(&filter, &before).await;
    let mut conn = redis.connection().await;
    let _: () = redis::cmd("SAVE").query_async(&mut conn).await.unwrap();
    let snapshot = std::env::temp_dir().join(format!("bloomgate-rollback-{:x}.rdb", rand::random::<u64>()));
    std::fs::copy(redis.snapshot_path(), &snapshot).unwrap();
    let after = random_keys(1_000);
    a.insert_all(&filter, &after).await;
    let old = stats(&a, &filter).await["generation"].as_u64().unwrap();

    // Restarted from the snapshot: the keys are back, the bits of `after` are not.
    redis.restart_from(&snapshot);
    let _ = std::fs::remove_file(&snapshot);
    let all: Vec<String> = before.iter().chain(&after).cloned().collect();
    let started = Instant::now();
    let mut rebuilt = false;
    while started.elapsed() < Duration::from_secs(60) && !rebuilt {
        for origin in [&a, &b] {
            let answers = origin.lookup_all(&filter, &all).await;
            let missed = answers.iter().filter(|(seen, _)| !seen).count();
            assert_eq!(missed, 0, "{missed} acknowledged keys 'not seen' from a Redis restarted from an old snapshot");
        }
        rebuilt = stats(&b, &filter).await["generation"].as_u64().is_some_and(|g| g != old);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(rebuilt, "no rebuild within 60 s of the rollback");
    eprintln!("rebuilt {:?} after the rollback", started.elapsed());
    // The old generation's segments are never served again: its (generation, index, version)
    // names could now mean other bits.
    let old_segment = a.edge_get(&format!("/v1/filters/{filter}/segments/{old}/0")).await;
    assert_eq!(old_segment.status(), StatusCode::NOT_FOUND);
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    assert!(a.lookup_all(&filter, &all).await.iter().all(|(seen, _)| *seen));
    let absent = a.lookup_all(&filter, &random_keys(1_000)).await;
    assert!(absent.iter().filter(|(_, by)| by == "filter").count() >= 950, "filter answers resume after the rebuild");
    assert_eq!(a.put(&filter, &random_keys(1)[0]).await.status(), StatusCode::CREATED);
}

async fn redis_keys(redis: &RedisServer, pattern: &str) -> Vec<String> {
    let mut conn = redis.connection().await;
    redis::cmd("KEYS").arg(pattern).query_async(&mut conn).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_bits_key_is_repaired_and_a_lost_meta_key_leaves_no_orphans() {
    services().await;
    let redis = RedisServer::start();
    let mut cfg = own_keyspace(adversarial(config(Some(redis.url()), &cassandra_addr())), &keyspace());
    cfg.recovery_interval_ms = 300;
    let origin = TestOrigin::start(cfg).await;
    let filter = unique_filter("lost");
    origin.create_filter(&filter, 20_000, 0.01).await;
    let keys = random_keys(2_000);
    origin.insert_all(&filter, &keys).await;
    let first = stats(&origin, &filter).await["generation"].as_u64().unwrap();

    // One segment's bits, alone: its version key stays, so only a check of the bits sees it.
    let mut conn = redis.connection().await;
    let _: () = redis::cmd("DEL").arg(format!("bg:{{{filter}:{first}:0}}:bits")).query_async(&mut conn).await.unwrap();
    assert!(origin.lookup_all(&filter, &keys).await.iter().all(|(seen, _)| *seen));
    let second = wait_for_switch(&origin, &filter, first, Duration::from_secs(30)).await;
    assert!(origin.lookup_all(&filter, &keys).await.iter().all(|(seen, _)| *seen));
    let more = random_keys(200);
    origin.insert_all(&filter, &more).await; // every segment takes writes again

    // The meta key: the generations it named are orphaned unless the rebuild collects them.
    let _: () = redis::cmd("DEL").arg(format!("bg:{{{filter}}}:meta")).query_async(&mut conn).await.unwrap();
    assert!(origin.lookup_all(&filter, &more).await.iter().all(|(seen, _)| *seen));
    let third = wait_for_switch(&origin, &filter, second, Duration::from_secs(30)).await;
    assert!(origin.lookup_all(&filter, &keys).await.iter().all(|(seen, _)| *seen));
    let leftover = redis_keys(&redis, &format!("bg:{{{filter}:{second}:*}}:bits")).await;
    assert!(leftover.is_empty(), "generation {second}'s bits outlived its lost state: {leftover:?}");
    assert!(!redis_keys(&redis, &format!("bg:{{{filter}:{third}:*}}:bits")).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn filters_larger_than_the_limit_are_refused_before_anything_is_stored() {
    services().await;
    let mut cfg = config(shared_redis(), &cassandra_addr());
    cfg.max_filter_bytes = 64 << 20;
    let origin = TestOrigin::start(cfg).await;
    let huge = |capacity: f64| serde_json::json!({ "capacity": capacity as u64, "fp_rate": 0.01 });
    let filter = unique_filter("huge");
    for body in [huge(1e13), huge(1e8)] {
        let r = origin
            .http
            .put(format!("{}/v1/filters/{filter}", origin.base))
            .bearer_auth(TOKEN)
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::BAD_REQUEST, "{body}");
        let problem: Value = r.json().await.unwrap();
        assert!(problem["detail"].as_str().unwrap().contains("max_filter_bytes"), "{problem}");
    }
    assert_eq!(origin.get(&filter, &random_keys(1)[0]).await.status(), StatusCode::NOT_FOUND, "nothing was created");
    origin.create_filter(&filter, 10_000, 0.01).await;
    let r = origin
        .http
        .post(format!("{}/v1/filters/{filter}/rebuild", origin.base))
        .bearer_auth(TOKEN)
        .json(&huge(1e9))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST, "a resize past the limit");
    assert_eq!(stats(&origin, &filter).await["capacity"], 10_000, "the definition was not changed");
}

/// Why the database of an origin built from `cfg` refuses to serve, or Ok when it serves. The
/// origin starts either way (it connects in the background and says why in readiness); its
/// first attempt has ended when `build_state` returns.
async fn database_refusal(cfg: Config) -> Result<(), String> {
    let state = bloomgate_origin::build_state(cfg).await.expect("an origin starts whatever its stores say");
    state.gate.database().ping().await.map_err(|e| e.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_that_might_miss_acknowledged_writes_are_refused_at_start() {
    services().await;
    let mut cfg = config(shared_redis(), &cassandra_addr());
    cfg.cassandra_keyspace = keyspace();
    cfg.cassandra_replication = "{'class': 'SimpleStrategy', 'replication_factor': 3}".into();
    cfg.cassandra_consistency = "one".into();
    let err = database_refusal(cfg.clone()).await.expect_err("consistency one with three replicas was accepted");
    assert!(err.contains("R + W > RF"), "{err}");
    cfg.cassandra_consistency = "quorum".into();
    // Quorum overlaps (the single test node then cannot serve it, but the config is sound).
    database_refusal(cfg).await.expect("quorum reads meet quorum writes on three replicas");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_managed_schema_is_checked_never_created() {
    services().await;
    let mut cfg = config(shared_redis(), &cassandra_addr());
    cfg.cassandra_keyspace = keyspace();
    cfg.cassandra_manage_schema = false;
    let err = database_refusal(cfg.clone())
        .await
        .expect_err("an origin that manages no schema served a keyspace that does not exist");
    // The operator is told what to run (tests/tests/schema_migrations.rs has the rest).
    assert!(err.contains("records no schema version") && err.contains("bloomgate-origin schema apply"), "{err}");
    // Nothing was created meanwhile: the same start is refused the same way.
    assert!(database_refusal(cfg.clone()).await.is_err(), "the check created the schema");
    // Once the schema exists (here created by a managing origin), the check passes.
    database_refusal(Config { cassandra_manage_schema: true, ..cfg.clone() }).await.unwrap();
    database_refusal(cfg).await.unwrap();
}

/// Sends raw bytes and returns what comes back before the server closes or `wait` passes.
async fn raw_exchange(addr: &str, request: &[u8], wait: Duration) -> (String, bool) {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(request).await.unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let closed = loop {
        match tokio::time::timeout(wait, stream.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => break true,
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
            Err(_) => break false,
        }
    };
    (String::from_utf8_lossy(&got).into_owned(), closed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_or_tokenless_clients_cannot_hold_the_origin() {
    services().await;
    let mut cfg = config(shared_redis(), &cassandra_addr());
    cfg.header_read_timeout_ms = 500;
    let origin = TestOrigin::start(cfg).await;
    let addr = origin.base.trim_start_matches("http://").to_owned();
    // Half a request head, then nothing: closed after the header-read timeout.
    let started = Instant::now();
    let (_, closed) = raw_exchange(&addr, b"GET /healthz HTTP/1.1\r\nHost: x\r\n", Duration::from_secs(5)).await;
    assert!(closed && started.elapsed() < Duration::from_secs(3), "a half-sent head held the connection");
    // A write announcing a large body without a token: refused before the body is read.
    let request = b"PUT /v1/filters/f/keys/ab HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n";
    let (answer, _) = raw_exchange(&addr, request, Duration::from_secs(2)).await;
    assert!(answer.starts_with("HTTP/1.1 401"), "expected 401 before the body: {answer:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_quick_start_loses_no_key_during_a_rebuild() {
    // The embedded stores: the filter in process, keys in a redb file. No services needed.
    let dir = std::env::temp_dir().join(format!("bloomgate-quick-{:x}", rand::random::<u64>()));
    let mut cfg = adversarial(config(None, "unused:0"));
    cfg.cassandra_nodes.clear();
    cfg.data_dir = dir.clone();
    cfg.rebuild_settle_ms = 3_000;
    let origin = Arc::new(TestOrigin::start(cfg).await);
    let filter = unique_filter("quick");
    origin.create_filter(&filter, 20_000, 0.01).await;
    origin.insert_all(&filter, &random_keys(2_000)).await;
    let race = Race::start(vec![origin.clone()], &filter, 2, Duration::from_millis(10));
    origin.rebuild_now(&filter).await.unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let result = race.finish().await;
    assert_clean(&result, 200);
    let answers = origin.lookup_all(&filter, &result.acked).await;
    let missed = answers.iter().filter(|(seen, _)| !seen).count();
    assert_eq!(missed, 0, "{missed} keys acknowledged during the in-process rebuild read 'not seen'");
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_state_leaves_no_cached_generation_readable() {
    services().await;
    let redis = RedisServer::start();
    let ks = keyspace();
    let mut a_cfg = own_keyspace(adversarial(config(Some(redis.url()), &cassandra_addr())), &ks);
    a_cfg.recovery_interval_ms = 300;
    let a = TestOrigin::start(a_cfg).await;
    // B holds the filter's metadata for long: whatever it cached must stay safe to read.
    let mut b_cfg = own_keyspace(adversarial(config(Some(redis.url()), &cassandra_addr())), &ks);
    b_cfg.meta_cache_ms = 60_000;
    let b = TestOrigin::start(b_cfg).await;
    let filter = unique_filter("lost-state");
    a.create_filter(&filter, 20_000, 0.01).await;
    a.insert_all(&filter, &random_keys(1_000)).await;
    let first = stats(&a, &filter).await["generation"].as_u64().unwrap();
    assert!(b.lookup_all(&filter, &random_keys(10)).await.iter().any(|(_, by)| by == "filter"), "B cached the state");

    // The state key alone goes (deleted, evicted); the generation it named keeps its bits
    // until the rebuild that follows names a new one, which then takes every write.
    let mut conn = redis.connection().await;
    let _: () = redis::cmd("DEL").arg(format!("bg:{{{filter}}}:meta")).query_async(&mut conn).await.unwrap();
    wait_for("a new generation to be named", Duration::from_secs(30), || async {
        let s = stats(&a, &filter).await;
        let named = [&s["building_generation"], &s["generation"]].iter().filter_map(|g| g.as_u64()).any(|g| g != first);
        named.then_some(())
    })
    .await;
    let written = random_keys(200);
    a.insert_all(&filter, &written).await;
    let answers = b.lookup_all(&filter, &written).await;
    let missed: Vec<_> = answers.iter().filter(|(seen, _)| !seen).collect();
    assert!(
        missed.is_empty(),
        "{} keys written after the state was lost read 'not seen' from a cached generation",
        missed.len()
    );
}
