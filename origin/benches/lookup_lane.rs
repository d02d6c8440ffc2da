//! The lookup lane in process, for the development loop: one GET of an absent key through the
//! origin's whole router (`tower::ServiceExt::oneshot`, no socket), answered "no" by a local
//! copy under its read lease, side by side with the floor (axum alone on the same route, a 404
//! with a small JSON body). The same allocator as the binary (mimalloc).
//!
//! `cargo bench -p bloomgate-origin --bench lookup_lane` (about a minute). The figures that
//! count are end to end, over sockets (`negative-path`, BENCHMARKS.md); this one moves with the
//! code on the request path and nothing else.

use axum::body::Body;
use axum::http::{HeaderValue, Request, StatusCode};
use axum::Router;
use bloomgate_client::paths;
use bloomgate_origin::config::Config;
use bloomgate_origin::gate::{CreateFilter, Gate, GateSettings};
use bloomgate_origin::lease::{LeaseSettings, LeaseTerms, ReadConsistency};
use bloomgate_origin::routes::AppState;
use bloomgate_origin::store::embedded::{MemoryFilterStore, RedbDatabase};
use bloomgate_origin::store::JournalRetention;
use criterion::{criterion_group, criterion_main, Criterion};
use std::sync::Arc;
use std::time::Duration;
use tower::ServiceExt;

#[path = "../tests/common/floor.rs"]
mod floor;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const FILTER: &str = "bench";

/// A lease long enough that no lookup in the run waits for a round: the lane's own cost.
const LEASE: LeaseSettings = LeaseSettings {
    default_mode: ReadConsistency::Lease,
    terms: Some(LeaseTerms { lease_us: 500_000, drift_ppm: 1_000 }),
};

fn key(i: u64) -> String {
    format!("{i:064x}")
}

/// The origin's router over the in-process filter store (local copies and read leases on, as
/// over Redis) and a key file in `dir`, with one filter holding one key, its copy loaded.
async fn origin(dir: &std::path::Path) -> Router {
    let retention = JournalRetention { max_entries: 100_000, max_age: Duration::from_secs(600) };
    let filters = Arc::new(MemoryFilterStore::new(retention));
    let database = Arc::new(RedbDatabase::open(&dir.join("keys.redb")).expect("a key file"));
    let config = Config { data_dir: dir.to_owned(), recovery_interval_ms: 0, ..Config::default() };
    let settings = GateSettings {
        local_copy_max_bytes: 1 << 20,
        lease: LEASE,
        lease_tail_every: Duration::from_millis(50),
        ..GateSettings::from_config(&config)
    };
    let gate = Arc::new(Gate::new(filters, database, settings));
    let create = CreateFilter { segment_bytes: 4096, ..CreateFilter::new(100_000, 0.01) };
    gate.create_filter(FILTER, create).await.expect("the filter");
    gate.insert(FILTER, key(1).as_bytes(), b"").await.expect("a key");
    for _ in 0..500 {
        gate.lookup(FILTER, key(2).as_bytes()).await.expect("a lookup");
        if gate.local_copy_bytes() > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(gate.local_copy_bytes() > 0, "the copy was never loaded");
    let caps = Arc::new(bloomgate_origin::caps_for(&config, 1 << 20).expect("caps"));
    bloomgate_origin::app(AppState { gate, config: Arc::new(config), caps })
}

/// One GET of `path`, its body read whole; its status and who answered.
async fn get_once(app: &Router, path: &str) -> (StatusCode, Option<HeaderValue>) {
    let request = Request::get(path).body(Body::empty()).expect("a request");
    let response = app.clone().oneshot(request).await.expect("an answer");
    let (parts, body) = response.into_parts();
    let _ = axum::body::to_bytes(body, usize::MAX).await.expect("a body");
    (parts.status, parts.headers.get("x-bloomgate-answered-by").cloned())
}

fn lookup_lane(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
    let dir = std::env::temp_dir().join(format!("bloomgate-bench-lane-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a directory");
    let origin = runtime.block_on(origin(&dir));
    let floor = floor::floor();
    let absent = paths::key(FILTER, &key(2));
    // What is measured is a "no" from the filter, not a fall-through or a refusal.
    let (status, by) = runtime.block_on(get_once(&origin, &absent));
    assert_eq!((status, by), (StatusCode::NOT_FOUND, Some(HeaderValue::from_static("filter"))));

    let mut group = c.benchmark_group("lookup_lane");
    group.measurement_time(Duration::from_secs(10));
    group.bench_function("no, leased copy", |b| b.iter(|| runtime.block_on(get_once(&origin, &absent))));
    group.bench_function("floor", |b| b.iter(|| runtime.block_on(get_once(&floor, &absent))));
    group.finish();
    let _ = std::fs::remove_dir_all(&dir);
}

criterion_group!(benches, lookup_lane);
criterion_main!(benches);
