//! An origin whose wall clock runs ahead of the others' by more than the journal's retention
//! (`journal_max_age_ms`) writes into the same insert journal as they do. Its adds must age the
//! journal by Redis's clock, the clock entry ids come from: aged by its own, every add it made
//! trimmed every entry as "older than the retention", and edges and local copies behind by one
//! write had to reload whole filters.
//!
//! The skewed origin runs in a process of its own (this test binary again, one ignored test)
//! under Debian's libfaketime, 20 minutes ahead; the test fails if the clock it reads there is
//! not ahead.
//!
//! # Running
//! `scripts/services start`, `apt-get install faketime`, then
//! `cargo test -p bloomgate-tests --test clock_skew`.

use bloomgate_client::api::CreateFilter;
use bloomgate_filter::{JournalPosition, Manifest};
use bloomgate_tests::faketime::{wall_clock_ahead_of_redis_us, with_wall_clock_off_by};
use bloomgate_tests::origin::TestOrigin;
use bloomgate_tests::{random_keys, unique_filter};
use reqwest::StatusCode;
use std::process::Command;

/// Names the filter the skewed writer writes to; set only in its process.
const SKEWED_FILTER: &str = "BG_TEST_SKEWED_FILTER";
/// How far ahead the skewed origin's clock runs: twice the default retention (10 minutes).
const AHEAD: &str = "+20m";
async fn manifest(origin: &TestOrigin, filter: &str) -> Manifest {
    let r = origin.edge_get(&format!("/v1/filters/{filter}/manifest")).await;
    assert_eq!(r.status(), StatusCode::OK);
    r.json().await.unwrap()
}

/// The status of a journal read from `after`: 200 while the journal still holds what follows it,
/// 410 once it was trimmed past it.
async fn journal_from(origin: &TestOrigin, filter: &str, generation: u64, after: JournalPosition) -> StatusCode {
    let path =
        format!("/v1/filters/{filter}/journal/{generation}?after={}&after_id={}", after.added, after.stream_id());
    origin.edge_get(&path).await.status()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_origin_whose_clock_runs_ahead_trims_no_recent_journal_entry() {
    let origin = TestOrigin::on_services(|_| {}).await;
    let filter = unique_filter("skew");
    let create = CreateFilter { segment_bytes: 4096, ..CreateFilter::new(50_000, 0.01) };
    origin.client.create_filter(&filter, &create).await.unwrap();
    let start = manifest(&origin, &filter).await;
    let first = start.journal.expect("the filter keeps an insert journal");
    // Redis trims a stream a node (up to 100 entries) at a time: 300 adds fill whole nodes a
    // trim by age would take.
    for key in random_keys(300) {
        assert_eq!(origin.put(&filter, &key).await.status(), StatusCode::CREATED);
    }
    assert_eq!(journal_from(&origin, &filter, start.generation, first).await, StatusCode::OK);

    let mut skewed = Command::new(std::env::current_exe().unwrap());
    let skewed = with_wall_clock_off_by(&mut skewed, AHEAD)
        .args(["skewed_writer", "--exact", "--ignored", "--nocapture"])
        .env(SKEWED_FILTER, &filter)
        .status()
        .expect("start the skewed writer");
    assert!(skewed.success(), "the skewed writer failed ({skewed}): its output is above");

    assert_eq!(
        journal_from(&origin, &filter, start.generation, first).await,
        StatusCode::OK,
        "writes through an origin whose clock runs {AHEAD} trimmed the journal's recent entries"
    );
    let head = manifest(&origin, &filter).await.journal.unwrap();
    assert!(head.added >= first.added + 305, "the skewed writer's 5 adds are in the journal: {head:?}");
}

/// The skewed origin: a process of its own, started by the test above under libfaketime. Writes
/// five keys, one add each, to the filter it is given.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run by an_origin_whose_clock_runs_ahead_trims_no_recent_journal_entry, in a process with a skewed clock"]
async fn skewed_writer() {
    let filter = std::env::var(SKEWED_FILTER).expect("started by the clock-skew test, which names the filter");
    let ahead_us = wall_clock_ahead_of_redis_us().await;
    assert!(
        ahead_us >= 15 * 60 * 1_000_000,
        "this process's clock is {ahead_us} µs off Redis's, not {AHEAD} ahead: is libfaketime loaded?"
    );
    let origin = TestOrigin::on_services(|_| {}).await;
    for key in random_keys(5) {
        assert_eq!(origin.put(&filter, &key).await.status(), StatusCode::CREATED);
    }
}
