//! A burst far past what an origin's memory holds: batch writes at their limits (a full batch of
//! the longest keys) all at once, with single-key lookups going on beside them. With the caps
//! derived from a memory budget, the heap the burst takes stays within that budget, the excess
//! is refused at once with 429 + Retry-After, lookups are never refused (their class is apart),
//! and every batch the origin acknowledged is stored. The same burst with an explicit cap too
//! high for the budget (`max_in_flight`) takes more than the budget: the control that shows the
//! first bound is the caps' doing.
//!
//! The heap is counted by this test binary's global allocator (`peak_alloc`): the origin runs in
//! process, and the bodies the client sends are built before the baseline is taken. Each batch
//! holds its last kilobyte until every batch of the burst has sent the rest, so the origin holds
//! every body it admitted at the same moment: what the burst costs does not depend on how fast
//! the machine happens to be.
//!
//! # Running
//! `scripts/services start`, then `cargo test -p bloomgate-tests --test admission_burst -- --nocapture`.

use bloomgate_tests::origin::{TestOrigin, TOKEN};
use bloomgate_tests::raw_http::{post_gathered, Gathering};
use bloomgate_tests::unique_filter;
use bytes::Bytes;
use futures::future::join_all;
use peak_alloc::PeakAlloc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

#[global_allocator]
static HEAP: PeakAlloc = PeakAlloc;

const MIB: u64 = 1 << 20;
/// The origin's memory budget.
const BUDGET: u64 = 256 * MIB;
/// Batch writes sent at once. Each body is ~2 MiB (a full batch of the longest keys), held whole
/// by the origin before its handler runs, and up to ~8.5 MiB while it is decoded; gathered (see
/// `burst`), the bodies alone come to ~330 MiB were all admitted: past the budget however fast
/// or slow the machine is.
const BURST: usize = 160;

/// The longest key hex allows, unique by `i`.
fn long_key(i: usize) -> String {
    let mut key = format!("{:016x}{:016x}", rand::random::<u64>(), i as u64);
    while key.len() < 2 * bloomgate_filter::MAX_KEY_BYTES {
        key.push('a');
    }
    key
}

/// What one burst did.
struct Burst {
    /// Heap bytes above the baseline at the peak.
    peak: u64,
    /// Batches acknowledged (their keys).
    stored: Vec<Vec<String>>,
    /// Batches refused with 429 and Retry-After.
    refused: usize,
    /// Batches answered 503 + Retry-After (the database's own timeout under the burst, seen on
    /// slow machines): not acknowledged, so nothing is owed for them.
    unavailable: usize,
    /// Single-key lookups answered 200 or 404, and any other answers.
    lookups: (usize, Vec<u16>),
}

/// The burst through an origin with `max_in_flight` (0: derived from the budget); with
/// `read_back`, every acknowledged batch is then read back.
async fn burst(max_in_flight: usize, read_back: bool) -> Burst {
    let origin = TestOrigin::on_services(|c| {
        c.memory_budget_bytes = BUDGET;
        c.max_in_flight = max_in_flight;
        c.max_connections = 256;
        c.local_copy_max_bytes = 0;
        // The test bounds memory, not latency: a slow machine must not turn a long batch
        // write into a timeout.
        c.request_timeout_ms = 120_000;
        c.cassandra_timeout_ms = 60_000;
        c.redis_write_timeout_ms = 60_000;
    })
    .await;
    let filter = unique_filter("burst");
    let create = bloomgate_client::api::CreateFilter {
        key_format: bloomgate_filter::KeyFormat::Hex { digits: None },
        ..bloomgate_client::api::CreateFilter::new(100_000, 0.01)
    };
    origin.client.create_filter(&filter, &create).await.unwrap();
    let max_batch = origin.state.config.max_batch;
    let batches: Vec<(Vec<String>, Bytes)> = (0..BURST)
        .map(|_| {
            let keys: Vec<String> = (0..max_batch).map(long_key).collect();
            let body = Bytes::from(serde_json::to_vec(&serde_json::json!({ "keys": keys })).unwrap());
            (keys, body)
        })
        .collect();
    let target = format!("/v1/filters/{filter}/keys");
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let base = HEAP.current_usage() as u64;
    HEAP.reset_peak_usage();

    let done = Arc::new(AtomicBool::new(false));
    let lookers = spawn_lookers(&origin, &filter, &done);
    // Every batch's body but its last kilobyte, then the rest once all are in: the origin holds
    // every body it admitted at once, on a fast machine and a slow one alike.
    let gathering = Gathering::of(BURST);
    let sends = batches.iter().map(|(keys, body)| {
        let (origin, target, gathering) = (&origin.base, &target, &gathering);
        async move {
            let answer = post_gathered(origin, target, TOKEN, body, 1024, gathering).await;
            let answer = answer.unwrap_or_else(|e| panic!("the origin answers every request of the burst: {e}"));
            (keys, answer.status, answer.header("retry-after").is_some())
        }
    });
    let answers = join_all(sends).await;
    done.store(true, Ordering::SeqCst);
    let peak = (HEAP.peak_usage() as u64).saturating_sub(base);
    let mut lookups = (0, Vec::new());
    for looker in lookers {
        let (answered, other) = looker.await.unwrap();
        lookups.0 += answered;
        lookups.1.extend(other);
    }
    let mut out = Burst { peak, stored: Vec::new(), refused: 0, unavailable: 0, lookups };
    for (keys, status, retry_after) in answers {
        match status {
            200 => out.stored.push(keys.clone()),
            429 => {
                assert!(retry_after, "a 429 says when to retry");
                out.refused += 1;
            }
            503 => {
                assert!(retry_after, "a 503 says when to retry");
                out.unavailable += 1;
            }
            other => panic!("a batch write answered {other}: only 200, 429 or 503 expected"),
        }
    }
    // Every acknowledged batch is stored: each of its keys is seen.
    for keys in out.stored.iter().filter(|_| read_back) {
        for chunk in keys.chunks(100) {
            let seen = origin.lookup_all(&filter, chunk).await;
            assert!(seen.iter().all(|(seen, _)| *seen), "an acknowledged batch write lost keys");
        }
    }
    out
}

/// Four tasks doing single-key lookups beside the burst, until `done` is set and each has had
/// at least one answer: they show that lookups are never refused while batch writes are. Each
/// returns how many lookups were answered 200 or 404, and every other answer (0: none at all).
fn spawn_lookers(
    origin: &TestOrigin,
    filter: &str,
    done: &Arc<AtomicBool>,
) -> Vec<tokio::task::JoinHandle<(usize, Vec<u16>)>> {
    (0..4)
        .map(|_| {
            let (http, base, filter, done) =
                (origin.http.clone(), origin.base.clone(), filter.to_owned(), done.clone());
            tokio::spawn(async move {
                let (mut answered, mut other) = (0, Vec::new());
                while !done.load(Ordering::SeqCst) || answered == 0 {
                    let url = format!("{base}/v1/filters/{filter}/keys/{}", long_key(0));
                    match http.get(url).send().await.map(|r| r.status().as_u16()) {
                        Ok(200 | 404) => answered += 1,
                        Ok(status) => other.push(status),
                        Err(_) => other.push(0),
                    }
                }
                (answered, other)
            })
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_past_memory_is_refused_while_lookups_go_on() {
    let capped = burst(0, true).await;
    println!(
        "caps from a {} MiB budget: {} batches stored, {} refused, {} unavailable, peak heap +{} MiB; lookups answered {}, other {:?}",
        BUDGET / MIB,
        capped.stored.len(),
        capped.refused,
        capped.unavailable,
        capped.peak / MIB,
        capped.lookups.0,
        capped.lookups.1
    );
    assert!(
        capped.refused > 0,
        "{BURST} batch writes at once fit a {} MiB budget: the burst is too small",
        BUDGET / MIB
    );
    assert!(!capped.stored.is_empty(), "no batch write admitted");
    assert!(
        capped.peak <= BUDGET,
        "the burst took {} MiB of heap, over the {} MiB budget",
        capped.peak / MIB,
        BUDGET / MIB
    );
    assert!(capped.lookups.0 > 0 && capped.lookups.1.is_empty(), "lookups refused or failed: {:?}", capped.lookups.1);

    // The control shows what the caps hold off; reading its keys back would show nothing more.
    let uncapped = burst(10_000, false).await;
    println!(
        "max_in_flight = 10000: {} batches stored, {} refused, {} unavailable, peak heap +{} MiB",
        uncapped.stored.len(),
        uncapped.refused,
        uncapped.unavailable,
        uncapped.peak / MIB
    );
    assert!(
        uncapped.peak > BUDGET,
        "without the derived caps the same burst took only {} MiB: the test no longer shows what the caps hold",
        uncapped.peak / MIB
    );
}
