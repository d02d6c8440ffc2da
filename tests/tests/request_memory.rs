//! What one admitted request costs in memory, measured: the heap bytes it holds at its peak,
//! counted by a global allocator, for each kind of request at its limits (the longest keys, a
//! full batch, the largest values, written so their JSON answer is the largest it can be).
//!
//! # Running
//! `scripts/services start`, then `cargo test -p bloomgate-tests --test request_memory --
//! --nocapture` (prints the figures). Fails if a kind costs more than `Costs` assumes.

use bloomgate_origin::admission::cost::{Costs, CONNECTION_BYTES};
use bloomgate_origin::metrics::Kind;
use bloomgate_tests::origin::{TestOrigin, TOKEN};
use bloomgate_tests::unique_filter;
use peak_alloc::PeakAlloc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[global_allocator]
static HEAP: PeakAlloc = PeakAlloc;

/// Sends `request` on a new connection and reads the answer to its end into `scratch`
/// (allocated before, so the client's own reading costs nothing); the status.
async fn exchange(addr: &str, request: &[u8], scratch: &mut [u8]) -> u16 {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(request).await.unwrap();
    let mut head = [0u8; 12];
    stream.read_exact(&mut head).await.unwrap();
    while stream.read(scratch).await.unwrap() > 0 {}
    std::str::from_utf8(&head[9..12]).unwrap().parse().unwrap()
}

/// The peak heap bytes above the baseline while `request` is answered, the least of `runs`
/// runs (other tasks of the process allocate now and then; the request's own cost is the same
/// in every run).
async fn peak_of(addr: &str, request: &[u8], expect: u16, runs: usize) -> Vec<usize> {
    let mut scratch = vec![0u8; 64 * 1024];
    let mut peaks = Vec::new();
    for _ in 0..runs {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let base = HEAP.current_usage();
        HEAP.reset_peak_usage();
        let status = exchange(addr, request, &mut scratch).await;
        peaks.push(HEAP.peak_usage().saturating_sub(base));
        assert_eq!(status, expect);
    }
    peaks
}

fn request(method: &str, addr: &str, path: &str, json: bool, body: &[u8]) -> Vec<u8> {
    let kind = if json { "content-type: application/json\r\n" } else { "" };
    let mut out = format!(
        "{method} {path} HTTP/1.1\r\nhost: {addr}\r\nauthorization: Bearer {TOKEN}\r\n{kind}content-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(body);
    out
}

/// The longest key hex allows (2 × MAX_KEY_BYTES digits), unique by `i`.
fn long_key(i: usize) -> String {
    let mut key = format!("{:016x}{:016x}", rand::random::<u64>(), i as u64);
    while key.len() < 2 * bloomgate_filter::MAX_KEY_BYTES {
        key.push('a');
    }
    key
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_kind_of_request_costs_at_most_what_the_caps_assume() {
    for (b, v) in [(1000, 4096), (250, 4096), (1000, 1024), (100, 0)] {
        println!("max_batch {b} max_value_bytes {v}");
        measure(b, v).await;
    }
}

async fn measure(b: usize, v: usize) {
    let origin = TestOrigin::on_services(|c| {
        c.local_copy_max_bytes = 0;
        c.max_batch = b;
        c.max_value_bytes = v;
    })
    .await;
    let addr = origin.base.trim_start_matches("http://").to_owned();
    let filter = unique_filter("memory");
    let create = bloomgate_client::api::CreateFilter {
        key_format: bloomgate_filter::KeyFormat::Hex { digits: None },
        ..bloomgate_client::api::CreateFilter::new(10_000, 0.01)
    };
    origin.client.create_filter(&filter, &create).await.unwrap();
    let config = origin.state.config.clone();
    let keys: Vec<String> = (0..config.max_batch).map(long_key).collect();
    // Values of control characters: JSON writes each as six bytes (`\u0001`).
    let value = vec![1u8; config.max_value_bytes];
    let mut scratch = vec![0u8; 64 * 1024];
    for key in &keys {
        let put = request("PUT", &addr, &format!("/v1/filters/{filter}/keys/{key}"), false, &value);
        assert_eq!(exchange(&addr, &put, &mut scratch).await, 201);
    }
    let batch = serde_json::to_vec(&serde_json::json!({ "keys": keys })).unwrap();
    let fresh: Vec<String> = (0..config.max_batch).map(long_key).collect();
    let fresh_batch = serde_json::to_vec(&serde_json::json!({ "keys": fresh })).unwrap();
    let lookup = request("GET", &addr, &format!("/v1/filters/{filter}/keys/{}", keys[0]), false, b"");
    let write = request("PUT", &addr, &format!("/v1/filters/{filter}/keys/{}", keys[1]), false, &value);
    let lookups = request("POST", &addr, &format!("/v1/filters/{filter}/lookups"), true, &batch);
    let writes = request("POST", &addr, &format!("/v1/filters/{filter}/keys"), true, &fresh_batch);
    println!("body sizes: batch lookup {} B, batch write {} B", batch.len(), fresh_batch.len());
    // What the caps assume each kind costs, against the least peak of a few runs.
    let costs = Costs::of(&config);
    for (kind, request, status, runs) in [
        (Kind::Lookup, &lookup, 200, 5),
        (Kind::Write, &write, 201, 5),
        (Kind::BatchLookup, &lookups, 200, 3),
        (Kind::BatchWrite, &writes, 200, 3),
    ] {
        let peaks = peak_of(&addr, request, status, runs).await;
        let least = *peaks.iter().min().unwrap() as u64;
        println!("{kind:?} {peaks:?} (assumed {})", costs.of_kind(kind));
        assert!(
            least <= costs.of_kind(kind),
            "a {kind:?} at max_batch {b}, max_value_bytes {v} held {least} bytes at its peak, more than the \
             {} the in-flight caps assume (origin/src/admission/cost.rs): the caps would admit more than memory holds",
            costs.of_kind(kind)
        );
    }
    // Idle connections.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let base = HEAP.current_usage();
    let mut open = Vec::new();
    for _ in 0..200 {
        open.push(tokio::net::TcpStream::connect(&addr).await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let idle = (HEAP.current_usage().saturating_sub(base)) / 200;
    println!("idle connection {idle}");
    assert!(
        idle as u64 <= CONNECTION_BYTES,
        "an idle connection holds {idle} bytes, more than the {CONNECTION_BYTES} assumed"
    );
    for s in open.iter_mut() {
        s.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n").await.unwrap();
        let mut head = [0u8; 12];
        s.read_exact(&mut head).await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    println!("kept-alive connection {}", (HEAP.current_usage().saturating_sub(base)) / 200);
    for s in open.iter_mut() {
        let head = request("POST", &addr, &format!("/v1/filters/{filter}/keys"), true, &fresh_batch);
        s.write_all(&head[..head.len() - 100_000]).await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    println!("partial-body connection {}", (HEAP.current_usage().saturating_sub(base)) / 200);
}
