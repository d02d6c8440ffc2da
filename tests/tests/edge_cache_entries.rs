//! The edge's Cache API entries under `wrangler dev` (workerd), across isolates sharing one
//! Cache API (`--persist-to`): an entry one isolate put is used by the next with the same edge
//! secret, with no segment from the origin; under another secret it is refused, read as a miss
//! and replaced, and the replacement is used in turn. The entry format's forgeries are covered
//! natively (`edge/tests/forged_cache_entries.rs`); this shows the worker's own reading and
//! writing of entries agree in workerd.
//!
//! # Running
//! `scripts/services start` and `scripts/edge-build` (builds the worker, installs wrangler),
//! then `cargo test -p bloomgate-tests --test edge_cache_entries -- --test-threads 1`.
//! `scripts/test` does all of it.

use bloomgate_client::api::IsolateCounts;
use bloomgate_tests::edge::{batch as edge_batch, Options, Wrangler};
use bloomgate_tests::origin::{TestOrigin, EDGE_SECRET};
use bloomgate_tests::{random_keys, unique_filter};
use std::path::Path;
use std::time::Duration;

/// The freshness bound S the edges run with.
const FRESHNESS_SECS: u32 = 3;
/// The secret of a second origin and the edges in front of it.
const OTHER_SECRET: &str = "another-test-edge-secret";

/// An edge with `secret` in front of `origin`, its Cache API kept in `persist`.
async fn edge(origin: &TestOrigin, secret: &str, persist: &Path) -> Wrangler {
    let mut options = Options::new(FRESHNESS_SECS);
    options.persist_to = Some(persist.to_owned());
    Wrangler::start_with(&origin.base, secret, options).await
}

/// The counts of the isolate serving `edge`, asked with `secret`.
async fn counts(http: &reqwest::Client, edge: &Wrangler, secret: &str) -> IsolateCounts {
    let url = format!("{}{}", edge.base, bloomgate_client::paths::ISOLATE);
    let r = http.get(&url).header(bloomgate_client::headers::EDGE_SECRET, secret).send().await.unwrap();
    assert!(r.status().is_success(), "{url}: {}", r.status());
    r.json::<bloomgate_client::api::IsolateReport>().await.unwrap().counts
}

/// Absent keys looked up at `edge`: all "not seen", nearly all answered there (a false positive
/// goes to the origin). Then a second for the Cache API put that follows the answer.
async fn absent_keys_answered_at_the_edge(http: &reqwest::Client, edge: &Wrangler, filter: &str) {
    let answers = edge_batch(http, &edge.base, filter, &random_keys(100)).await;
    assert!(answers.iter().all(|(seen, _)| !*seen));
    let at_edge = answers.iter().filter(|(_, by)| by == "edge").count();
    assert!(at_edge >= 90, "{at_edge} of 100 absent keys answered at the edge");
    tokio::time::sleep(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entries_are_used_under_their_secret_and_refused_under_another() {
    let origin = TestOrigin::on_services(|_| {}).await;
    let other_origin = TestOrigin::on_services(|c| c.edge_secret = Some(OTHER_SECRET.into())).await;
    let filter = unique_filter("cache-entries");
    origin.create_filter(&filter, 10_000, 0.01).await;
    origin.insert_all(&filter, &random_keys(200)).await;
    let persist = std::env::temp_dir().join(unique_filter("bloomgate-cache-entries"));
    let http = reqwest::Client::new();

    let put = edge(&origin, EDGE_SECRET, &persist).await;
    absent_keys_answered_at_the_edge(&http, &put, &filter).await;
    let c = counts(&http, &put, EDGE_SECRET).await;
    assert!(c.cache_puts >= 1 && c.origin_segments >= 1, "the first isolate fetched and put the segment: {c:?}");
    drop(put);

    used_by_the_next_isolate(&http, &origin, EDGE_SECRET, &persist, &filter).await;

    let refusing = edge(&other_origin, OTHER_SECRET, &persist).await;
    absent_keys_answered_at_the_edge(&http, &refusing, &filter).await;
    let c = counts(&http, &refusing, OTHER_SECRET).await;
    assert!(c.cache_refused >= 1, "another secret's entry was refused: {c:?}");
    assert_eq!(c.cache_hits, 0, "{c:?}");
    assert!(c.origin_segments >= 1 && c.cache_puts >= 1, "read as a miss, fetched and put again: {c:?}");
    drop(refusing);

    used_by_the_next_isolate(&http, &other_origin, OTHER_SECRET, &persist, &filter).await;
    let _ = std::fs::remove_dir_all(&persist);
}

/// A new isolate with `secret` answers from the entry in `persist`, without the origin's
/// segment and refusing nothing.
async fn used_by_the_next_isolate(
    http: &reqwest::Client,
    origin: &TestOrigin,
    secret: &str,
    persist: &Path,
    filter: &str,
) {
    let next = edge(origin, secret, persist).await;
    absent_keys_answered_at_the_edge(http, &next, filter).await;
    let c = counts(http, &next, secret).await;
    assert!(c.cache_hits >= 1, "the entry was read back: {c:?}");
    assert_eq!((c.cache_refused, c.origin_segments), (0, 0), "{c:?}");
}
