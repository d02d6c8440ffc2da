//! The Worker following the shared feed (`SHARED_FEED=true`) under `wrangler dev` (workerd),
//! against a live origin: once its follower holds a copy, absent keys are answered "not seen"
//! from it, with no manifest or journal request of the isolate's own; and while writes go on,
//! no key acknowledged S or more before a lookup starts is answered "not seen", every write's
//! lookup recorded and checked afterwards. `wrangler dev` does not cache `fetch()`, so here every
//! feed request reaches the origin; what the CDN's cache does with them is measured by the fleet
//! run (`tools/edge-fleet`).
//!
//! # Running
//! `scripts/services start` and `scripts/edge-build`, then
//! `cargo test -p bloomgate-tests --test edge_shared_feed`. `scripts/test` does all of it.

use bloomgate_client::api::IsolateCounts;
use bloomgate_tests::edge::{isolate_report, Options, Wrangler};
use bloomgate_tests::origin::{TestOrigin, EDGE_SECRET};
use bloomgate_tests::{random_keys, unique_filter};
use std::time::{Duration, Instant};

/// The freshness bound S the edge runs with.
const FRESHNESS: Duration = Duration::from_secs(2);
/// One write every this long, and one lookup of each kind: the same on a fast machine and a
/// slow one.
const PACE: Duration = Duration::from_millis(100);

async fn counts(http: &reqwest::Client, edge: &Wrangler) -> IsolateCounts {
    isolate_report(http, &edge.base).await.expect("the isolate's report").counts
}

/// A lookup at the edge: (status, answered by).
async fn look_up(http: &reqwest::Client, edge: &Wrangler, filter: &str, key: &str) -> (u16, String) {
    let r = http.get(format!("{}/v1/filters/{filter}/keys/{key}", edge.base)).send().await.unwrap();
    let by = r.headers().get("x-bloomgate-answered-by").and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
    (r.status().as_u16(), by)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_worker_answers_from_the_shared_feed_and_keeps_its_promise() {
    let origin = TestOrigin::on_services(|_| {}).await;
    let filter = unique_filter("shared-feed");
    origin.create_filter(&filter, 50_000, 0.01).await;
    origin.insert_all(&filter, &random_keys(50)).await;
    let mut options = Options::new(FRESHNESS.as_secs() as u32);
    options.vars.push(("SHARED_FEED".into(), "true".into()));
    let edge = Wrangler::start_with(&origin.base, EDGE_SECRET, options).await;
    let http = reqwest::Client::new();

    // Lookups move the follower: the first ones take the isolate's own path while it loads.
    let deadline = Instant::now() + Duration::from_secs(20);
    while counts(&http, &edge).await.feed_no == 0 {
        assert!(
            Instant::now() < deadline,
            "no answer from the shared feed within 20 s: {:?}",
            counts(&http, &edge).await
        );
        let (status, _) = look_up(&http, &edge, &filter, &random_keys(1)[0]).await;
        assert!(status == 404 || status == 200, "{status}");
        tokio::time::sleep(PACE).await;
    }
    let before = counts(&http, &edge).await;

    // Writes through the origin and lookups at the edge, recorded: (key, acknowledged at).
    let mut acknowledged: Vec<(String, Instant)> = Vec::new();
    let mut history: Vec<(String, Duration, u16)> = Vec::new();
    let mut absent = (0, 0);
    let until = Instant::now() + Duration::from_secs(8);
    while Instant::now() < until {
        let key = random_keys(1).remove(0);
        origin.client.insert(&filter, &key, b"").await.expect("a write");
        acknowledged.push((key, Instant::now()));
        let started = Instant::now();
        if let Some((key, at)) = acknowledged.iter().rev().find(|(_, at)| started - *at >= FRESHNESS) {
            let (status, _) = look_up(&http, &edge, &filter, key).await;
            history.push((key.clone(), started - *at, status));
        }
        let (status, by) = look_up(&http, &edge, &filter, &random_keys(1)[0]).await;
        if status == 404 {
            absent.0 += 1;
            absent.1 += usize::from(by == "edge");
        }
        tokio::time::sleep(PACE).await;
    }
    let after = counts(&http, &edge).await;
    eprintln!("absent keys {absent:?}, checked lookups {}; before {before:?}; after {after:?}", history.len());

    let late: Vec<_> = history.iter().filter(|(_, _, status)| *status != 200).collect();
    assert!(late.is_empty(), "keys acknowledged S or more before answered otherwise than seen: {late:?}");
    assert!(history.len() >= 20, "too few checked lookups: {}", history.len());
    let from_feed = after.feed_no - before.feed_no;
    assert!(absent.1 * 10 >= absent.0 * 9, "absent keys mostly answered at the edge: {absent:?}");
    assert!(
        from_feed * 2 >= absent.1 as u64,
        "most of the edge's answers came from the feed's copy ({from_feed} of {}): {after:?}",
        absent.1
    );
    assert!(after.feed_requests > before.feed_requests, "the follower kept fetching chunks: {after:?}");
    assert_eq!(after.feed_fallbacks, 0, "{after:?}");
    let fleet = isolate_report(&http, &edge.base).await.expect("the isolate's report").fleet;
    assert!(fleet.points >= 1 && fleet.feed_points == fleet.points, "a feed point beside each counts point: {fleet:?}");
}
