//! The edge under `wrangler dev` (workerd) in front of a real origin over real Redis and
//! Cassandra: no false negatives, absent keys answered at the edge, the freshness bound,
//! behaviour with the origin cut off, corrupted segments, and bad keys; the edge following
//! the origin to a new filter generation (a rebuild, a recovery after FLUSHALL) within S; odd
//! key paths read alike by edge and origin (raw bytes on the wire); HEAD lookups; batch limits
//! and the origin's refusals relayed; batch bodies bounded while read and parsed; an answer at
//! `ORIGIN_URL` that is not bloomgate's never relayed; and a slow origin never turning into a
//! stale "no".
//!
//! # Running
//! `scripts/services start` and `scripts/edge-build` (builds the worker, installs wrangler),
//! then `cargo test -p bloomgate-tests --test edge_e2e -- --test-threads 1`.
//! `scripts/test` does all of it. The edge reaches the origin through a proxy the test can cut
//! or make corrupt large bodies.

use bloomgate_tests::edge::{batch as edge_batch, edge_stack, isolate_report, EdgeStack, Wrangler};
use bloomgate_tests::fault_proxy::ChaosProxy;
use bloomgate_tests::origin::{config, TestOrigin, EDGE_SECRET, TOKEN};
use bloomgate_tests::raw_http::{self, RawResponse};
use bloomgate_tests::redis_server::RedisServer;
use bloomgate_tests::{cassandra_addr, random_keys, redis_addr, require, unique_filter};
use reqwest::StatusCode;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// The freshness bound S the edge runs with in this test.
const FRESHNESS_SECS: u32 = 3;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_edge_answers_no_itself_and_never_a_false_negative() {
    let EdgeStack { origin, proxy, edge } = edge_stack(FRESHNESS_SECS, |_| {}).await;
    let http = reqwest::Client::new();
    let filter = unique_filter("edge");
    origin.create_filter(&filter, 50_000, 0.01).await;
    let present = random_keys(10_000);
    origin.insert_all(&filter, &present).await;

    every_present_key_is_seen(&http, &edge, &filter, &present).await;
    let absent = absent_keys_are_answered_at_the_edge(&http, &origin, &edge, &filter).await;
    a_write_is_seen_within_s(&http, &origin, &edge, &filter).await;
    bad_keys_are_refused_by_the_edge_alone(&http, &proxy, &edge, &filter, &present).await;
    with_the_origin_cut_off_no_stays_no_for_s_and_nothing_else(&http, &proxy, &edge, &filter, &absent, &present).await;
    a_damaged_segment_is_never_used(&http, &origin, &proxy, &edge).await;
    a_cold_isolate_fetches_a_segment_once(&http, &origin, &edge).await;
}

/// No false negatives across 10^4 present keys, through the edge.
async fn every_present_key_is_seen(http: &reqwest::Client, edge: &Wrangler, filter: &str, present: &[String]) {
    let answers = edge_batch(http, &edge.base, filter, present).await;
    assert!(answers.iter().all(|(seen, _)| *seen), "the edge answered 'not seen' for an acknowledged key");
    for key in present.iter().take(100) {
        let r = http.get(format!("{}/v1/filters/{filter}/keys/{key}", edge.base)).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::OK);
    }
}

/// 10^4 absent keys: answered at the edge; the origin sees about fp_rate of them. Returns them.
async fn absent_keys_are_answered_at_the_edge(
    http: &reqwest::Client,
    origin: &TestOrigin,
    edge: &Wrangler,
    filter: &str,
) -> Vec<String> {
    let absent = random_keys(10_000);
    let before = origin.metric("bloomgate_lookups_total{answered_by=\"filter\"}").await
        + origin.metric("bloomgate_lookups_total{answered_by=\"database\"}").await;
    let answers = edge_batch(http, &edge.base, filter, &absent).await;
    assert!(answers.iter().all(|(seen, _)| !*seen));
    let after = origin.metric("bloomgate_lookups_total{answered_by=\"filter\"}").await
        + origin.metric("bloomgate_lookups_total{answered_by=\"database\"}").await;
    let reached_origin = after - before;
    assert!(reached_origin <= 200.0, "{reached_origin} of 10000 absent keys reached the origin");
    let at_edge = answers.iter().filter(|(_, by)| by == "edge").count();
    assert!(at_edge >= 9_800, "{at_edge} answered at the edge");
    let single = http.get(format!("{}/v1/filters/{filter}/keys/{}", edge.base, absent[0])).send().await.unwrap();
    if single.status() == StatusCode::NOT_FOUND
        && single.headers().get("x-bloomgate-answered-by").is_some_and(|v| v == "edge")
    {
        assert_eq!(single.json::<Value>().await.unwrap()["seen"], false);
    }
    absent
}

/// Freshness: a key acknowledged by the origin is "seen" at the edge within S seconds.
async fn a_write_is_seen_within_s(http: &reqwest::Client, origin: &TestOrigin, edge: &Wrangler, filter: &str) {
    let fresh = random_keys(5);
    for key in &fresh {
        let r = http.get(format!("{}/v1/filters/{filter}/keys/{key}", edge.base)).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::NOT_FOUND); // its segment is now held by the edge
    }
    let mut worst = Duration::ZERO;
    for key in &fresh {
        assert_eq!(origin.put(filter, key).await.status(), StatusCode::CREATED);
        let acked = Instant::now();
        loop {
            let r = http.get(format!("{}/v1/filters/{filter}/keys/{key}", edge.base)).send().await.unwrap();
            if r.status() == StatusCode::OK {
                break;
            }
            assert!(acked.elapsed() <= Duration::from_secs(u64::from(FRESHNESS_SECS) + 1), "stale past S for {key}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        worst = worst.max(acked.elapsed());
    }
    eprintln!("freshness: worst {worst:?} with S = {FRESHNESS_SECS} s");
}

/// Bad keys get the origin's 4xx from the edge alone: with the origin cut off they still do.
async fn bad_keys_are_refused_by_the_edge_alone(
    http: &reqwest::Client,
    proxy: &ChaosProxy,
    edge: &Wrangler,
    filter: &str,
    present: &[String],
) {
    proxy.cut();
    let r = http.get(format!("{}/v1/filters/{filter}/keys/{}", edge.base, &present[0][..63])).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    assert_eq!(r.json::<Value>().await.unwrap()["detail"], "key must be 64 hex digits, got 63");
    let r = http.get(format!("{}/v1/filters/{filter}/keys/{}", edge.base, "g".repeat(64))).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    let r = http.put(format!("{}/v1/filters/{filter}/keys/{}", edge.base, present[0])).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::METHOD_NOT_ALLOWED);
}

/// Origin unreachable: for up to S after its last manifest, absent keys whose segments the
/// edge holds are still "no"; present keys are 503 with Retry-After, never "no". Past S the
/// edge no longer trusts its copy (a writer may have reached the origin meanwhile): 503.
async fn with_the_origin_cut_off_no_stays_no_for_s_and_nothing_else(
    http: &reqwest::Client,
    proxy: &ChaosProxy,
    edge: &Wrangler,
    filter: &str,
    absent: &[String],
    present: &[String],
) {
    proxy.heal();
    tokio::time::sleep(Duration::from_secs(u64::from(FRESHNESS_SECS))).await;
    let r = http.get(format!("{}/v1/filters/{filter}/keys/{}", edge.base, absent[1])).send().await.unwrap();
    assert!(r.status() == StatusCode::NOT_FOUND); // manifest fetched again just now
    proxy.cut();
    let cut_at = Instant::now();
    let probes: Vec<_> = absent[..100]
        .iter()
        .chain(present[..20].iter())
        .map(|key| {
            let (http, url) = (http.clone(), format!("{}/v1/filters/{filter}/keys/{key}", edge.base));
            tokio::spawn(async move {
                let r = http.get(url).send().await.unwrap();
                let by = r.headers().get("x-bloomgate-answered-by").map(|v| v.to_str().unwrap().to_owned());
                (r.status(), by, r.headers().contains_key("retry-after"))
            })
        })
        .collect();
    let mut outcomes = Vec::new();
    for p in probes {
        outcomes.push(p.await.unwrap());
    }
    assert!(
        cut_at.elapsed() < Duration::from_secs(u64::from(FRESHNESS_SECS)),
        "probes took too long to test the window"
    );
    let (absent_out, present_out) = outcomes.split_at(100);
    let edge_no =
        absent_out.iter().filter(|(s, by, _)| *s == StatusCode::NOT_FOUND && by.as_deref() == Some("edge")).count();
    assert!(absent_out
        .iter()
        .all(|(s, _, retry)| *s == StatusCode::NOT_FOUND || (*s == StatusCode::SERVICE_UNAVAILABLE && *retry)));
    assert!(edge_no >= 95, "{edge_no} of 100 absent keys answered at the edge with the origin down");
    assert!(
        present_out.iter().all(|(s, _, retry)| *s == StatusCode::SERVICE_UNAVAILABLE && *retry),
        "present key with the origin down: {present_out:?}"
    );
    tokio::time::sleep(Duration::from_secs(u64::from(FRESHNESS_SECS))).await;
    let r = http.get(format!("{}/v1/filters/{filter}/keys/{}", edge.base, absent[2])).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE, "past S without a manifest the edge must not answer 'no'");
    proxy.heal();
}

/// A segment damaged in transit is rejected, never used: lookups go to the origin.
async fn a_damaged_segment_is_never_used(
    http: &reqwest::Client,
    origin: &TestOrigin,
    proxy: &ChaosProxy,
    edge: &Wrangler,
) {
    let damaged = unique_filter("damaged");
    origin.create_filter(&damaged, 50_000, 0.01).await;
    let few = random_keys(100);
    origin.insert_all(&damaged, &few).await;
    // The manifest is small and passes; segment bodies (64 KiB) arrive damaged.
    proxy.corrupt_large_chunks();
    for key in random_keys(30) {
        let r = http.get(format!("{}/v1/filters/{damaged}/keys/{key}", edge.base)).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::NOT_FOUND);
        assert_ne!(r.headers()["x-bloomgate-answered-by"], "edge", "a damaged segment was used");
    }
    for key in &few[..10] {
        let r = http.get(format!("{}/v1/filters/{damaged}/keys/{key}", edge.base)).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::OK);
    }
    proxy.heal();
}

/// Lookups arriving together at a cold isolate share one segment fetch: a new filter (one
/// segment, in no cache yet), 16 lookups at once.
async fn a_cold_isolate_fetches_a_segment_once(http: &reqwest::Client, origin: &TestOrigin, edge: &Wrangler) {
    let cold = unique_filter("cold");
    origin.create_filter(&cold, 20_000, 0.01).await;
    origin.insert_all(&cold, &random_keys(100)).await;
    let segment_fetches = || origin.metric("bloomgate_edge_requests_total{kind=\"segment\"}");
    let before = segment_fetches().await;
    let lookups: Vec<_> = random_keys(16)
        .into_iter()
        .map(|key| {
            let (http, url) = (http.clone(), format!("{}/v1/filters/{cold}/keys/{key}", edge.base));
            tokio::spawn(async move { http.get(url).send().await.unwrap().status() })
        })
        .collect();
    for lookup in lookups {
        assert_eq!(lookup.await.unwrap(), StatusCode::NOT_FOUND);
    }
    let fetched = segment_fetches().await - before;
    assert_eq!(fetched, 1.0, "16 concurrent lookups in a cold isolate made {fetched} segment fetches");
}

/// The generation the origin serves, None while its filter is lost.
async fn origin_generation(origin: &TestOrigin, filter: &str) -> Option<u64> {
    origin.state.gate.filter_store().state(filter).await.ok().and_then(|s| s.active).map(|m| m.generation)
}

/// Waits until the origin serves a generation other than `old`; returns it and when it was seen.
async fn switch_from(origin: &TestOrigin, filter: &str, old: u64, within: Duration) -> (u64, Instant) {
    let deadline = Instant::now() + within;
    loop {
        if let Some(generation) = origin_generation(origin, filter).await.filter(|g| *g != old) {
            return (generation, Instant::now());
        }
        assert!(Instant::now() < deadline, "the origin did not switch from generation {old} within {within:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Looks up fresh absent keys at the edge until one is answered there from `generation`,
/// checking between tries that present keys stay "seen" through the edge. Returns how long
/// after `since` that was.
async fn edge_moves_to(
    http: &reqwest::Client,
    base: &str,
    filter: &str,
    generation: u64,
    present: &[String],
    since: Instant,
) -> Duration {
    let limit = Duration::from_secs(u64::from(FRESHNESS_SECS) + 1);
    for round in 0.. {
        let start = (round * 20) % present.len();
        let answers = edge_batch(http, base, filter, &present[start..(start + 20).min(present.len())]).await;
        assert!(answers.iter().all(|(seen, _)| *seen), "a present key answered 'not seen' while the edge moves");
        for key in random_keys(5) {
            let r = http.get(format!("{base}/v1/filters/{filter}/keys/{key}")).send().await.unwrap();
            assert!(
                r.status() == StatusCode::NOT_FOUND || r.status() == StatusCode::SERVICE_UNAVAILABLE,
                "absent key answered {}",
                r.status()
            );
            let from = r.headers().get("x-bloomgate-generation").map(|v| v.to_str().unwrap().parse::<u64>().unwrap());
            if from == Some(generation) {
                return since.elapsed();
            }
        }
        assert!(
            since.elapsed() <= limit,
            "the edge still does not answer from generation {generation} after {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    unreachable!("the loop above returns or fails")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_edge_follows_a_rebuild_and_a_recovery_within_its_freshness_bound() {
    require("Cassandra", &cassandra_addr()).await;
    let redis = RedisServer::start();
    let mut cfg = config(Some(redis.url()), &cassandra_addr());
    // Its own keyspace: the automatic rebuild must not act on other tests' filters.
    cfg.cassandra_keyspace = format!("bg_test_{:x}", rand::random::<u32>());
    cfg.recovery_interval_ms = 500;
    cfg.request_timeout_ms = 10_000;
    let origin = TestOrigin::start(cfg).await;
    let edge = Wrangler::start(&origin.base, EDGE_SECRET, FRESHNESS_SECS).await;
    let http = reqwest::Client::new();
    let filter = unique_filter("follow");
    origin.create_filter(&filter, 20_000, 0.01).await;
    let present = random_keys(2_000);
    origin.insert_all(&filter, &present).await;
    let first = origin_generation(&origin, &filter).await.expect("a new filter has a generation");
    edge_moves_to(&http, &edge.base, &filter, first, &present, Instant::now()).await;

    // An operator's rebuild switches generations: the edge follows within S.
    let r = http.post(format!("{}/v1/filters/{filter}/rebuild", origin.base)).bearer_auth(TOKEN).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::ACCEPTED);
    let (second, switched_at) = switch_from(&origin, &filter, first, Duration::from_secs(60)).await;
    let moved = edge_moves_to(&http, &edge.base, &filter, second, &present, switched_at).await;
    eprintln!(
        "rebuild: the edge answered from generation {second} {moved:?} after the switch (S = {FRESHNESS_SECS} s)"
    );

    // Redis loses everything; the origin notices and rebuilds on its own. Throughout, present
    // keys stay "seen" at the edge; once rebuilt, the edge answers from the new generation.
    let mut conn = redis.connection().await;
    let _: () = redis::cmd("FLUSHALL").query_async(&mut conn).await.unwrap();
    let flushed_at = Instant::now();
    let (third, recovered_at) = loop {
        let answers = edge_batch(&http, &edge.base, &filter, &present[..100]).await;
        assert!(answers.iter().all(|(seen, _)| *seen), "a present key answered 'not seen' after FLUSHALL");
        if let Some(g) = origin_generation(&origin, &filter).await.filter(|g| *g != second) {
            break (g, Instant::now());
        }
        assert!(flushed_at.elapsed() < Duration::from_secs(90), "no automatic rebuild within 90 s of FLUSHALL");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let moved = edge_moves_to(&http, &edge.base, &filter, third, &present, recovered_at).await;
    eprintln!(
        "FLUSHALL: rebuilt as generation {third} {:?} after the flush; the edge answered from it {moved:?} later",
        recovered_at - flushed_at
    );
    let answers = edge_batch(&http, &edge.base, &filter, &present).await;
    assert!(answers.iter().all(|(seen, _)| *seen), "a present key answered 'not seen' after the recovery");
}

/// Percent-decoding as lenient decoders do it (axum's, the `percent-encoding` crate's): a `%`
/// not followed by two hex digits is kept as it is. The keys a writer may have meant.
fn lenient_decode(raw: &str) -> Vec<u8> {
    let bytes = raw.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| char::from(b).to_digit(16);
        match (bytes[i], bytes.get(i + 1).copied().and_then(hex), bytes.get(i + 2).copied().and_then(hex)) {
            (b'%', Some(hi), Some(lo)) => {
                out.push((hi * 16 + lo) as u8);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    out
}

/// What one side answered for a raw key path: GET status, its `seen` (if the body has one),
/// who answered, and the HEAD status.
#[derive(Debug)]
struct Sides {
    get: u16,
    seen: Option<bool>,
    by: String,
    head: u16,
}

async fn ask(base: &str, target: &str) -> Sides {
    let get: RawResponse = raw_http::request(base, "GET", target).await;
    let head = raw_http::request(base, "HEAD", target).await;
    let seen = serde_json::from_str::<Value>(&get.body).ok().and_then(|v| v["seen"].as_bool());
    let by = get.header("x-bloomgate-answered-by").unwrap_or("-").to_owned();
    Sides { get: get.status, seen, by, head: head.status }
}

/// Key segments exactly as they go on the wire. Among them, the ones edge and origin used
/// to read differently: a sign in an escape, dot segments, non-UTF-8, a literal backslash.
const ODD_KEY_PATHS: &[&str] = &[
    "plain",
    "%+1",
    "%-1",
    "%2e",
    "%2E",
    "%2E%2E",
    "%2e%2E",
    ".",
    "..",
    "...",
    ".%2e",
    "a%2eb",
    "%2e%2e%2fetc",
    "%252e",
    "%zz",
    "%4",
    "a%",
    "%%41",
    "%00",
    "a%00b",
    "%ff",
    "%e9",
    "%C3",
    "%C3%A9",
    "%c3%a9",
    "\u{e9}",
    "e%CC%81",
    "%F0%9F%98%80",
    "%EF%BB%BF",
    "a%2Fb",
    "a%2fb",
    "%25",
    "%2541",
    "+",
    "%2B",
    "%20x",
    "a;b",
    "%3B",
    "%3F",
    "a?x=1",
    "a#b",
    "%23",
    "~",
    "%7e",
    "%7E",
    "a%5Cb",
    "a\\b",
    "a|b",
    "a\"b",
    "%22",
    "a%09b",
    "a'b",
    "(x)",
    "*",
    "@",
    ":",
    "a:b",
    "%3A",
    "$&=,!",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_edge_and_the_origin_read_odd_key_paths_alike() {
    let EdgeStack { origin, edge, proxy: _proxy } = edge_stack(FRESHNESS_SECS, |_| {}).await;
    let filter = unique_filter("paths");
    let r = origin
        .http
        .put(format!("{}/v1/filters/{filter}", origin.base))
        .bearer_auth(TOKEN)
        .json(&json!({ "capacity": 10_000, "fp_rate": 0.01, "key_format": "bytes" }))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "create a bytes filter: {}", r.status());

    let absent = format!("absent-{:016x}", rand::random::<u64>());
    let mut table: Vec<String> = ODD_KEY_PATHS.iter().map(|s| (*s).to_owned()).collect();
    table.push(absent.clone());
    table.extend(["k".repeat(1024), "k".repeat(1025), "%6B".repeat(1024), "%6b".repeat(1025)]);
    let stored = store_every_meaning(&origin, &filter, &table, &absent).await;
    let (rows, broken) = compare_sides(&origin, &edge, &filter, &table).await;
    let table_text: String = rows.iter().map(|(.., row)| format!("  {row}\n")).collect();
    eprintln!("odd key paths ({} keys stored):\n{table_text}", stored.len());
    assert!(
        broken.is_empty(),
        "edge and origin disagree on {} paths:\n{}\nfull table:\n{table_text}",
        broken.len(),
        broken.join("\n")
    );

    // The table is not vacuous: stored keys are found, an absent one is ruled out at the edge.
    let row = |raw: &str| rows.iter().find(|(r, ..)| r == raw).unwrap();
    for raw in ["plain", "a%2Fb", "%C3%A9", "a%5Cb"] {
        assert_eq!((row(raw).1.get, row(raw).2.get), (200, 200), "{raw}\n{table_text}");
    }
    let (_, o, e, _) = row(&absent);
    assert_eq!((o.get, e.get, e.seen, e.by.as_str()), (404, 404, Some(false), "edge"), "\n{table_text}");
    for raw in ["%+1", "%2e", "%ff", "%00", ".."] {
        assert_eq!(row(raw).1.get, 400, "the origin refuses {raw}\n{table_text}");
    }
}

/// Stores every key a writer may have meant by each path, one batch each (a batch with a key
/// the API refuses stores nothing), before the edge's first manifest: all are covered.
async fn store_every_meaning(
    origin: &TestOrigin,
    filter: &str,
    table: &[String],
    absent: &str,
) -> std::collections::BTreeSet<String> {
    let mut stored = std::collections::BTreeSet::new();
    for raw in table.iter().filter(|raw| raw.as_str() != absent) {
        let Ok(key) = String::from_utf8(lenient_decode(raw)) else {
            continue; // not a JSON string: no writer can have stored it
        };
        let r = origin
            .http
            .post(format!("{}/v1/filters/{filter}/keys", origin.base))
            .bearer_auth(TOKEN)
            .json(&json!({ "keys": [key] }))
            .send()
            .await
            .unwrap();
        if r.status() == StatusCode::OK {
            stored.insert(key);
        } else {
            assert_eq!(r.status(), StatusCode::BAD_REQUEST, "storing {key:?}");
        }
    }
    stored
}

/// Each path asked of the origin and of the edge (GET and HEAD): a row per path, and the rows
/// where the two disagree in a way that matters.
async fn compare_sides(
    origin: &TestOrigin,
    edge: &Wrangler,
    filter: &str,
    table: &[String],
) -> (Vec<(String, Sides, Sides, String)>, Vec<String>) {
    let mut rows = Vec::new();
    let mut broken = Vec::new();
    for raw in table {
        let target = format!("/v1/filters/{filter}/keys/{raw}");
        let (o, e) = (ask(&origin.base, &target).await, ask(&edge.base, &target).await);
        let edge_no = e.get == 404 && e.seen == Some(false);
        let mut why = Vec::new();
        if o.get == 200 && e.get != 200 {
            why.push("origin 200 but edge not");
        }
        // Covers the origin's refusals too: where it answers 400, the edge refuses, forwards,
        // or finds the key; it never rules it out.
        if edge_no && !(o.get == 404 && o.seen == Some(false)) {
            why.push("edge said 'not seen' where the origin did not");
        }
        if o.head != o.get || e.head != e.get {
            why.push("HEAD and GET differ");
        }
        let shown: String = raw.chars().take(24).collect();
        let shown = if raw.len() > 24 { format!("{shown}…({} bytes)", raw.len()) } else { shown };
        let row = format!(
            "{shown:<38} origin {} {:<5} head {} | edge {} {:<5} by {:<8} head {} {}",
            o.get,
            o.seen.map_or("-".into(), |s| s.to_string()),
            o.head,
            e.get,
            e.seen.map_or("-".into(), |s| s.to_string()),
            e.by,
            e.head,
            why.join("; ")
        );
        if !why.is_empty() {
            broken.push(row.clone());
        }
        rows.push((raw.clone(), o, e, row));
    }
    (rows, broken)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn head_lookups_batch_limits_and_the_origins_refusals_at_the_edge() {
    require("Redis", &redis_addr()).await;
    require("Cassandra", &cassandra_addr()).await;
    let mut cfg = config(Some(format!("redis://{}/", redis_addr())), &cassandra_addr());
    // Below the edge's MAX_BATCH (1000 by default), so that the origin refuses what the edge
    // forwards and the edge must relay that refusal.
    cfg.max_batch = 10;
    let origin = TestOrigin::start(cfg).await;
    let edge = Wrangler::start(&origin.base, EDGE_SECRET, FRESHNESS_SECS).await;
    let http = reqwest::Client::new();
    let filter = unique_filter("head");
    origin.create_filter(&filter, 50_000, 0.01).await;
    let present = random_keys(20);
    for chunk in present.chunks(10) {
        origin.insert_all(&filter, chunk).await;
    }

    // HEAD: a stored key is 200 (never the "no route" 404 it used to be), an absent one 404;
    // neither has a body.
    let manifests = || origin.metric("bloomgate_edge_requests_total{kind=\"manifest\"}");
    let r = http.head(format!("{}/v1/filters/{filter}/keys/{}", edge.base, present[0])).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK, "HEAD of a stored key at the edge");
    assert!(r.headers().contains_key("x-bloomgate-answered-by"));
    assert!(r.bytes().await.unwrap().is_empty());
    let absent = &random_keys(1)[0];
    let r = http.head(format!("{}/v1/filters/{filter}/keys/{absent}", edge.base)).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND, "HEAD of an absent key at the edge");
    assert!(r.bytes().await.unwrap().is_empty());
    let r = http.get(format!("{}/v1/filters/{filter}/keys/{}", edge.base, present[1])).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);

    // Over MAX_BATCH: 413 from the edge before any work (no manifest asked for a new filter).
    let untouched = unique_filter("untouched");
    let before = manifests().await;
    let r = http
        .post(format!("{}/v1/filters/{untouched}/lookups", edge.base))
        .json(&json!({ "keys": random_keys(1001) }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(r.headers()["content-type"], "application/problem+json");
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["detail"], "batch has 1001 keys; at most 1000 are accepted per request");
    assert_eq!(body["hint"], "Split the batch into smaller requests.");
    assert_eq!(manifests().await, before, "the edge did work for a batch it refuses");

    // The origin's refusal of a forwarded batch is relayed as it is, not turned into a 503.
    let r = http
        .post(format!("{}/v1/filters/{filter}/lookups", edge.base))
        .json(&json!({ "keys": present }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::PAYLOAD_TOO_LARGE, "the origin's 413 for 20 'maybe' keys, relayed");
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["detail"], "batch has 20 keys; at most 10 are accepted per request");
    assert_eq!(body["hint"], "Split the batch into smaller requests.", "the origin's words, as the edge's");
    // Within the origin's limit the same keys are all "seen".
    let answers = edge_batch(&http, &edge.base, &filter, &present[..10]).await;
    assert!(answers.iter().all(|(seen, _)| *seen));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_origin_never_turns_into_a_stale_no() {
    let EdgeStack { origin, proxy, edge } = edge_stack(FRESHNESS_SECS, |_| {}).await;
    let http = reqwest::Client::new();
    let filter = unique_filter("slow");
    origin.create_filter(&filter, 200_000, 0.01).await;
    origin.insert_all(&filter, &random_keys(100)).await;

    // Two absent keys in different segments: the edge loads the first one's segment now; the
    // second one's segment must come from the origin later, when the origin has become slow.
    let r = http
        .get(format!("{}/v1/filters/{filter}/manifest", origin.base))
        .header("x-bloomgate-edge-secret", EDGE_SECRET);
    let manifest: bloomgate_filter::Manifest = r.send().await.unwrap().json().await.unwrap();
    assert!(manifest.params.segment_count > 1, "the test needs a filter of several segments");
    let segment_of = |key: &str| {
        let normalised = manifest.key_format.normalize(key.as_bytes()).unwrap();
        manifest.params.locate(&bloomgate_filter::hash_key(&normalised, manifest.params.seed)).segment
    };
    let candidates = random_keys(200);
    let warm = &candidates[0];
    let cold = candidates.iter().find(|k| segment_of(k) != segment_of(warm)).unwrap();
    let r = http.get(format!("{}/v1/filters/{filter}/keys/{warm}", edge.base)).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);

    // Every chunk now takes longer than S: the segment cannot arrive while the manifest is
    // fresh. The edge must not answer "no" from that manifest after waiting; it asks the origin
    // (a 404 from the origin, slowly) or gives up (503), within its timeouts.
    proxy.slow(Duration::from_secs(u64::from(FRESHNESS_SECS) + 1));
    let started = Instant::now();
    let r = http.get(format!("{}/v1/filters/{filter}/keys/{cold}", edge.base)).send().await.unwrap();
    let took = started.elapsed();
    let by = r.headers().get("x-bloomgate-answered-by").map(|v| v.to_str().unwrap().to_owned());
    eprintln!("slow origin: {} answered by {by:?} after {took:?}", r.status());
    assert_ne!(by.as_deref(), Some("edge"), "the edge answered from a manifest older than S ({took:?})");
    assert!(r.status() == StatusCode::NOT_FOUND || r.status() == StatusCode::SERVICE_UNAVAILABLE, "{}", r.status());
    assert!(took < Duration::from_secs(u64::from(FRESHNESS_SECS) + 15), "the edge waited {took:?} for a slow origin");
    proxy.heal();
}

/// wasm memory an oversized batch may add to the isolate (the body's bytes up to its 4 MiB limit,
/// read in chunks; the vector holding them may double once): a body or a key list held whole
/// before it is judged adds several times that.
const BOUNDED_BODY_GROWTH_MIB: u64 = 12;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_bodies_are_bounded_while_read_and_while_parsed() {
    let origin = TestOrigin::on_services(|_| {}).await;
    let edge = Wrangler::start(&origin.base, EDGE_SECRET, FRESHNESS_SECS).await;
    let http = reqwest::Client::new();
    let filter = unique_filter("bounded");
    origin.create_filter(&filter, 50_000, 0.01).await;
    let target = format!("/v1/filters/{filter}/lookups");
    let wasm_mib = || async { isolate_report(&http, &edge.base).await.expect("the isolate's report").wasm_bytes >> 20 };

    // A small chunked body is read as any other.
    let absent = random_keys(3);
    let small = serde_json::to_vec(&json!({ "keys": absent })).unwrap();
    let r = raw_http::post_chunked(&edge.base, &target, small, 7).await.unwrap();
    assert_eq!(r.status, 200, "{r:?}");
    let before = wasm_mib().await;

    // 24 MiB without a Content-Length: refused at the 4 MiB limit, never read whole. The
    // runtime closes the connection on the rest of the body, which may reset it before the
    // 413 is read: either is a refusal; the memory below says the body was not taken.
    let huge = format!(r#"{{"keys":["{}"]}}"#, "a".repeat(24 << 20)).into_bytes();
    match raw_http::post_chunked(&edge.base, &target, huge, 256 << 10).await {
        Ok(r) => {
            assert_eq!(r.status, 413, "{r:?}");
            assert!(r.body.contains("request body is over"), "{}", r.body);
        }
        Err(reset) => eprintln!("the oversized body: {reset}"),
    }

    // 900,000 one-letter keys in 3.6 MB, within the byte limit: refused for its keys, which
    // are counted while parsed, not kept (held, they would take ~30 MiB).
    let many = format!(r#"{{"keys":[{}"a"]}}"#, "\"a\",".repeat(899_999)).into_bytes();
    let r = raw_http::post_chunked(&edge.base, &target, many, 256 << 10).await.unwrap();
    assert_eq!(r.status, 413, "{r:?}");
    assert!(r.body.contains("batch has 900000 keys"), "{}", r.body);

    let answers = edge_batch(&http, &edge.base, &filter, &absent).await;
    assert!(answers.iter().all(|(seen, _)| !seen), "the edge answers as before after the refusals");
    let after = wasm_mib().await;
    assert!(
        after <= before + BOUNDED_BODY_GROWTH_MIB,
        "wasm memory grew from {before} to {after} MiB for two refused bodies"
    );
}

/// An HTTP server that answers every request `404` with an HTML page, as a load balancer or
/// another service at a misconfigured `ORIGIN_URL` would; its address.
async fn not_bloomgate() -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        while let Ok((mut socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = vec![0u8; 64 * 1024];
                let _ = socket.read(&mut buf).await;
                let page = "<html><body>Not Found</body></html>";
                let answer = format!(
                    "HTTP/1.1 404 Not Found\r\nContent-Type: text/html\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{page}",
                    page.len()
                );
                let _ = socket.write_all(answer.as_bytes()).await;
            });
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_that_is_not_bloomgates_is_never_relayed_as_not_seen() {
    let elsewhere = not_bloomgate().await;
    let edge = Wrangler::start(&format!("http://{elsewhere}"), EDGE_SECRET, FRESHNESS_SECS).await;
    let http = reqwest::Client::new();
    let key = &random_keys(1)[0];
    for method in [reqwest::Method::GET, reqwest::Method::HEAD] {
        let r = http.request(method.clone(), format!("{}/v1/filters/f/keys/{key}", edge.base)).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::BAD_GATEWAY, "{method}: another server's 404 relayed");
        assert!(!r.headers().contains_key("x-bloomgate-answered-by"));
    }
    let r =
        http.post(format!("{}/v1/filters/f/lookups", edge.base)).json(&json!({ "keys": [key] })).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::BAD_GATEWAY, "a batch: another server's 404 relayed");
    let body: Value = r.json().await.unwrap();
    assert!(body["hint"].as_str().is_some_and(|h| h.contains("ORIGIN_URL")), "{body}");
}
