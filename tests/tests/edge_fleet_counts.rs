//! The edge's counts for the fleet under `wrangler dev` (workerd), with `wrangler.toml`'s
//! Analytics Engine binding: the worker writes its data points through the binding (none
//! refused), one on its first request and then one per `FLEET_POINT_SECS`, and what they
//! carried adds up to the isolate report's counts as of the last point, column by column. What
//! a point holds (deltas, gauges, a refused write carried over) is tested natively in
//! `edge/src/fleet_counts.rs`; the columns' places in docs/operations.md are checked there too.
//!
//! # Running
//! `scripts/services start` and `scripts/edge-build`, then
//! `cargo test -p bloomgate-tests --test edge_fleet_counts`. `scripts/test` does all of it.

use bloomgate_client::api::{IsolateCounts, IsolateReport};
use bloomgate_tests::edge::{batch as edge_batch, isolate_report, Options, Wrangler};
use bloomgate_tests::origin::{TestOrigin, EDGE_SECRET};
use bloomgate_tests::{random_keys, unique_filter};
use std::time::Duration;

/// Seconds between the isolate's points in this test.
const POINT_SECS: u64 = 1;

/// The report's counts by the fleet's column names (those the points carry).
fn by_name(c: &IsolateCounts) -> Vec<(&'static str, u64)> {
    vec![
        ("requests", c.requests),
        ("edge_no", c.edge_no),
        ("forwarded", c.forwarded),
        ("batches", c.batches),
        ("batch_keys", c.batch_keys),
        ("batch_keys_forwarded", c.batch_keys_forwarded),
        ("cache_reads", c.cache_reads),
        ("cache_hits", c.cache_hits),
        ("cache_refused", c.cache_refused),
        ("cache_puts", c.cache_puts),
        ("cache_write_backs", c.cache_write_backs),
        ("origin_manifests", c.origin_manifests),
        ("origin_segments", c.origin_segments),
        ("origin_journal", c.origin_journal),
        ("origin_bytes", c.origin_bytes),
        ("local_catch_ups", c.local_catch_ups),
        ("dropped_by_switch", c.dropped_by_switch),
    ]
}

fn assert_points_add_up(report: &IsolateReport) {
    let fleet = &report.fleet;
    for (name, count) in by_name(&report.counts) {
        assert_eq!(fleet.sent.get(name), Some(&count), "{name}: the points carried what the report counts: {fleet:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_points_written_add_up_to_the_isolate_report() {
    let origin = TestOrigin::on_services(|_| {}).await;
    let filter = unique_filter("fleet-counts");
    origin.create_filter(&filter, 10_000, 0.01).await;
    let present = random_keys(50);
    origin.insert_all(&filter, &present).await;
    let mut options = Options::new(2);
    options.vars.push(("FLEET_POINT_SECS".into(), POINT_SECS.to_string()));
    let edge = Wrangler::start_with(&origin.base, EDGE_SECRET, options).await;
    let http = reqwest::Client::new();

    // Lookups of every kind over a few intervals: answers at the edge, forwards, batches.
    for round in 0..3 {
        let answers = edge_batch(&http, &edge.base, &filter, &random_keys(100)).await;
        assert!(answers.iter().all(|(seen, _)| !*seen), "absent keys are not seen");
        for key in present.iter().skip(round * 5).take(5) {
            let r = http.get(format!("{}/v1/filters/{filter}/keys/{key}", edge.base)).send().await.unwrap();
            assert_eq!(r.status(), 200, "{key} was stored");
        }
        tokio::time::sleep(Duration::from_millis(POINT_SECS * 1000 + 100)).await;
    }
    // A point is due, so this request writes one carrying itself; the report that follows is
    // built before its own request is counted.
    assert_eq!(http.get(format!("{}/healthz", edge.base)).send().await.unwrap().status(), 200);
    let report = isolate_report(&http, &edge.base).await.expect("the isolate's report");
    let fleet = &report.fleet;
    assert!(fleet.bound, "wrangler.toml binds the dataset: {fleet:?}");
    assert_eq!(fleet.format, "bloomgate-edge-counts/1");
    assert_eq!((fleet.every_secs, fleet.refused), (POINT_SECS, 0), "{fleet:?}");
    assert!(fleet.points >= 4, "a point on the first request, then one per interval: {fleet:?}");
    let c = &report.counts;
    assert!(c.batches == 3 && c.batch_keys == 300 && c.forwarded >= 15, "lookups of each kind: {c:?}");
    assert_points_add_up(&report);
}
