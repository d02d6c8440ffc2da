//! The edge's memory under a sustained, bounded lookup load: what the edge's workerd grows by
//! beyond a worker that does nothing (the null edge), both under `wrangler dev` with the same
//! load at the same time. `wrangler dev`'s own processes grow with the requests they serve,
//! whatever the worker (with wrangler 4.164, about 2 MiB per 100 requests in each of its two
//! workerd processes, the null edge's included: docs/bench/notes/edge-memory.md), so an
//! absolute bound measures wrangler; the difference is the edge's.
//!
//! # Running
//! `scripts/services start` and `scripts/edge-build`, then
//! `cargo test -p bloomgate-tests --test edge_memory -- --test-threads 1`.
//! The longer measurement behind BENCHMARKS.md is the `edge-memory` binary
//! (tools/bench/src/bin/edge-memory.rs).

use bloomgate_tests::edge_load::{beside_the_null_edge, Load, Report};
use std::time::Duration;

/// Over the second half of a minute at 60 lookups/s, each of the edge's workerd processes may
/// grow by at most this much more than the null edge's. Measured here (2 cores, both loads at
/// once, 2026-12-05): Worker +52 MiB against the null edge's +46, proxies +60 and +60. A leak
/// of ~9 KB per request served would fail it.
const GROWTH_BEYOND_THE_NULL_EDGE_MIB: f64 = 16.0;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_edge_grows_no_more_than_a_worker_that_does_nothing() {
    let load = Load { rate: 60, duration: Duration::from_secs(60), ..Load::default() };
    let (edge, null) = beside_the_null_edge(&load).await;
    served_the_load(&edge, &load, "the edge");
    served_the_load(&null, &load, "the null edge");
    for role in ["worker", "proxy"] {
        let (ours, control) = (edge.growth_mib(role, 0.5), null.growth_mib(role, 0.5));
        assert!(
            ours - control <= GROWTH_BEYOND_THE_NULL_EDGE_MIB,
            "the edge's {role} workerd grew {ours:.0} MiB over the second half, the null edge's {control:.0} MiB \
             (at most {GROWTH_BEYOND_THE_NULL_EDGE_MIB} MiB more allowed):\nedge\n{}null edge\n{}",
            edge.table(),
            null.table()
        );
    }
}

/// Whether `report` served `load`: no refusals or resets, at most 1 % timeouts (a client
/// timeout, 15 s, is the machine being overloaded, not the edge losing requests: the test
/// measures memory, not the machine's speed), 200s and 404s only, and 90 % answered.
fn served_the_load(report: &Report, load: &Load, what: &str) {
    assert_eq!(report.errors, 0, "{what}: requests refused or reset (a workerd restart?): {:?}", report.failures);
    assert!(report.timeouts * 100 <= report.sent, "{what}: {} of {} requests timed out", report.timeouts, report.sent);
    assert_eq!(report.unexpected, 0, "{what}: answers other than 200 and 404");
    assert!(report.answered * 10 >= report.sent * 9, "{what} did not keep up with {} lookups/s", load.rate);
}
