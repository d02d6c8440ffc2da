//! The edge's memory: the isolate's wasm memory stays within its budget however many filter
//! generations pass through it, and under a sustained, bounded lookup load the edge's workerd
//! grows no more than a worker that does nothing (the null edge) under `wrangler dev` with the
//! same load at the same time. `wrangler dev`'s own processes grow with the requests they serve,
//! whatever the worker (with wrangler 4.164, about 2 MiB per 100 requests in each of its two
//! workerd processes, the null edge's included: docs/bench/notes/edge-memory.md), so an
//! absolute bound would measure wrangler; the difference is the edge's.
//!
//! # Running
//! `scripts/services start` and `scripts/edge-build`, then
//! `cargo test -p bloomgate-tests --test edge_memory -- --test-threads 1`.
//! The longer measurements behind BENCHMARKS.md are the `edge-memory` binary
//! (tools/bench/src/bin/edge-memory.rs).

use bloomgate_client::api::IsolateReport;
use bloomgate_tests::edge::{batch, isolate_report, Options, Wrangler};
use bloomgate_tests::edge_load::{beside_the_null_edge, Load, Report};
use bloomgate_tests::origin::{TestOrigin, EDGE_SECRET};
use bloomgate_tests::{random_keys, unique_filter};
use std::time::{Duration, Instant};

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

const MIB: u64 = 1024 * 1024;
/// What the isolate may hold: less than one generation of the two filters together, so copies
/// are evicted within a generation as well as replaced across them.
const BUDGET_MIB: u64 = 2;
/// wasm memory beyond the budget for everything else: the module's data and stack (about 1.2
/// MiB before the first request), request bodies, a segment per lookup loading one, journal
/// chunks. Measured: 1.5 to 2 MiB above the held bytes.
const WORKING_MIB: u64 = 4;
/// Generations driven through the isolate.
const GENERATIONS: usize = 9;

/// One generation of `filter`: rebuilt, followed by the edge (a lookup answered from the new
/// generation within S and a margin), every one of its segments loaded by a batch of absent
/// keys, and every key written so far seen.
async fn next_generation(
    origin: &TestOrigin,
    edge: &Wrangler,
    http: &reqwest::Client,
    filter: &str,
    written: &[String],
) {
    let report = origin.rebuild_now(filter).await.expect("rebuild");
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let key = &random_keys(1)[0];
        let r = http.get(format!("{}/v1/filters/{filter}/keys/{key}", edge.base)).send().await.unwrap();
        let generation = r.headers().get("x-bloomgate-generation").and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
        if generation == Some(report.generation) {
            break;
        }
        assert!(Instant::now() < deadline, "the edge did not follow {filter} to generation {}", report.generation);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let absent = batch(http, &edge.base, filter, &random_keys(1_000)).await;
    assert!(absent.iter().all(|(seen, _)| !seen), "an absent key answered 'seen'");
    let answers = batch(http, &edge.base, filter, written).await;
    assert!(answers.iter().all(|(seen, _)| *seen), "a key acknowledged before the rebuild is not seen at the edge");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wasm_memory_stays_within_the_budget_across_generations() {
    let origin = TestOrigin::on_services(|_| {}).await;
    let mut options = Options::new(2);
    options.vars.push(("EDGE_MAX_HELD_BYTES".into(), format!("{BUDGET_MIB}MiB")));
    let edge = Wrangler::start_with(&origin.base, EDGE_SECRET, options).await;
    let http = reqwest::Client::new();
    // Two filters of 22 segments of 64 KiB (1.4 MiB each): together more than the budget.
    let filters = [unique_filter("generations-a"), unique_filter("generations-b")];
    let mut written = Vec::new();
    for filter in &filters {
        origin.create_filter(filter, 1_200_000, 0.01).await;
        let keys = random_keys(300);
        origin.insert_all(filter, &keys).await;
        written.push(keys);
    }
    let mut reports: Vec<IsolateReport> = Vec::new();
    for round in 0..GENERATIONS {
        let i = round % filters.len();
        // Keys written during the run too: the journal's tails come and go with generations.
        let more = random_keys(20);
        origin.insert_all(&filters[i], &more).await;
        written[i].extend(more);
        next_generation(&origin, &edge, &http, &filters[i], &written[i]).await;
        let report = isolate_report(&http, &edge.base).await.expect("the isolate's report");
        eprintln!(
            "generation {round}: wasm {:.1} MiB, held {:.2} MiB ({} copies, {} spare), {} copies dropped by switches, \
             buffers reused {} allocated {}",
            report.wasm_bytes as f64 / MIB as f64,
            report.held.total as f64 / MIB as f64,
            report.held.segment_count,
            report.held.spare_count,
            report.counts.dropped_by_switch,
            report.counts.buffers_reused,
            report.counts.buffers_allocated
        );
        assert!(report.held.total <= BUDGET_MIB * MIB, "held {} bytes, over the budget", report.held.total);
        assert!(
            report.wasm_bytes <= (BUDGET_MIB + WORKING_MIB) * MIB,
            "wasm memory {} MiB, over the budget and the working allowance",
            report.wasm_bytes / MIB
        );
        reports.push(report);
    }
    let last = reports.last().expect("reports");
    assert!(last.counts.dropped_by_switch > 0, "generation switches dropped no copy: {:?}", last.counts);
    assert!(last.counts.buffers_reused > last.counts.buffers_allocated, "buffers were not reused: {:?}", last.counts);
    // Bounded by the budget, not by the generations seen: after the first few, no growth.
    let early = reports[..GENERATIONS / 3].iter().map(|r| r.wasm_bytes).max().unwrap_or(0);
    assert!(
        last.wasm_bytes <= early + MIB,
        "wasm memory grew from {} to {} bytes over {GENERATIONS} generations",
        early,
        last.wasm_bytes
    );
}
