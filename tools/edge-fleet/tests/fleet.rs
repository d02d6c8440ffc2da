//! Tens of native isolates following one filter's shared feed through a hostile stand-in CDN
//! against a live origin (real Redis and Cassandra), while writes go on: no isolate ever answers
//! "not seen" for a key acknowledged S or more before, however stale the caches serve the
//! current document (never expiring) or whatever other key's answer they hand out; and most
//! feed requests never reach the origin. `tests/planted.rs` shows the same run catches a
//! follower that counts freshness from when it received a copy.
//!
//! # Running
//! `scripts/services start`, then `cargo test -p bloomgate-edge-fleet --test fleet`.

use bloomgate_cdn_sim::Hostile;
use bloomgate_client::api::CreateFilter;
use bloomgate_edge_fleet::{run, FleetOptions, FleetReport, OriginUpstream, Protocol};
use bloomgate_tests::origin::{TestOrigin, EDGE_SECRET};
use bloomgate_tests::unique_filter;
use std::sync::Arc;
use std::time::Duration;

/// A small fleet at bounded rates: the same on a quiet machine and a busy one.
pub fn small_fleet(hostile: Hostile, origin_base: &str) -> FleetOptions {
    FleetOptions {
        protocol: Protocol::Shared,
        isolates: 20,
        pops: 4,
        upper_tier: true,
        hostile,
        duration: Duration::from_secs(8),
        width_ms: 250,
        freshness_ms: 2_000,
        epsilon_ms: 100,
        write_every: Duration::from_millis(50),
        lookup_every: Duration::from_millis(20),
        link_latency: Duration::from_millis(30),
        pop_latency: Duration::from_millis(5),
        restart_every: Duration::from_secs(3),
        origin_base: origin_base.to_owned(),
    }
}

/// A small fleet run on a filter of its own, on a live origin, behind caches misbehaving so.
pub async fn fleet_run(hostile: Hostile) -> FleetReport {
    let origin = TestOrigin::on_services(|_| {}).await;
    let filter = unique_filter("fleet");
    let create = CreateFilter { segment_bytes: 4096, ..CreateFilter::new(50_000, 0.01) };
    origin.client.create_filter(&filter, &create).await.unwrap_or_else(|e| panic!("create {filter}: {e}"));
    let upstream = Arc::new(OriginUpstream::new(&origin.base, Duration::from_millis(30)));
    let options = small_fleet(hostile, &origin.base);
    let report = run(upstream, origin.client.clone(), &[filter], EDGE_SECRET, options).await;
    let (p50, p99) = (report.lag_quantile_ms(0.5), report.lag_quantile_ms(0.99));
    eprintln!(
        "{hostile:?}: lag p50 {p50:?} p99 {p99:?} ms; {:?}",
        FleetReport { lags_ms: Vec::new(), ..report.clone() }
    );
    report
}

// Not in the planted build (`tests/planted.rs` includes this file for its run).
#[cfg(not(feature = "planted-bugs"))]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tens_of_isolates_behind_a_hostile_cache_never_answer_an_acknowledged_key_not_seen() {
    for hostile in [Hostile::ServeExpired, Hostile::ServeOtherKey { every: 7 }] {
        let r = fleet_run(hostile).await;
        assert_eq!(r.violations, 0, "{hostile:?}: acknowledged keys answered not seen: {:?}", r.examples);
        // What the run must have shown for that to mean something.
        assert!(r.writes >= 40, "{hostile:?}: too few writes: {}", r.writes);
        assert!(r.not_seen >= 100, "{hostile:?}: isolates answered too few \"no\"s: {r:?}");
        assert!(r.cold_starts > 20, "{hostile:?}: no isolate started cold again: {r:?}");
        assert!(
            r.cdn.upstream * 3 < r.cdn.lower.requests,
            "{hostile:?}: the caches took too little off the origin: {:?}",
            r.cdn
        );
        if let Hostile::ServeOtherKey { .. } = hostile {
            assert!(
                r.rejected > 0 && r.cdn.lower.other_key > 0,
                "{hostile:?}: no other key's answer was refused: {r:?}"
            );
        }
    }
}
