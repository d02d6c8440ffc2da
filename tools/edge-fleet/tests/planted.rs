//! The negative control of `tests/fleet.rs`: the same fleet, its followers built with the
//! planted bug that counts a "no" from when the copy was received instead of from the end of
//! the last chunk applied. A cache serving a stale current document makes a cold isolate load
//! an old epoch and answer "no" for keys written since: the run must catch it. Runs only in a
//! build with the `planted-bugs` feature, in a cargo invocation of its own (scripts/test).

#![cfg(feature = "planted-bugs")]

#[path = "fleet.rs"]
#[allow(dead_code)]
mod fleet;

use bloomgate_cdn_sim::Hostile;
use bloomgate_edge::planted;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_counting_freshness_from_receipt_is_caught() {
    planted::select(Some(planted::Bug::FeedFreshnessFromReceipt.name()));
    let r = fleet::fleet_run(Hostile::ServeExpired).await;
    assert!(r.violations > 0, "the planted bug went unnoticed: {r:?}");
}
