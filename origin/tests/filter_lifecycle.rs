//! Filters as users manage them, on the embedded stores: the list; a drop (keys kept or
//! deleted) after which lookups and writes answer 404 "no such filter", never "not seen"; a
//! filter created again under the name, numbered after the dropped one, built from the keys a
//! drop kept, and held to the dropped one's key format; and a write racing a drop, which is
//! never acknowledged into nothing. `cargo test -p bloomgate-origin --test filter_lifecycle`.

mod common;

use axum::http::{Method, StatusCode};
use bloomgate_client::api::{CreateFilter, DropKeys};
use bloomgate_client::paths;
use bloomgate_origin::error::AppError;
use bloomgate_origin::gate::{Created, Gate, GateSettings};
use bloomgate_origin::store::embedded::MemoryFilterStore;
use common::hooked::Hooked;
use common::{key, Embedded, OPS, WRITER};
use serde_json::Value;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The generation answering `filter`'s lookups, waiting up to 10 s for one (a filter created
/// over kept keys has none until its first build).
async fn generation(origin: &Embedded, filter: &str) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let stats = origin.send(Method::GET, &paths::stats(filter), Some(OPS), None).await;
        if let Some(generation) = stats.json()["generation"].as_u64() {
            return generation;
        }
        assert!(Instant::now() < deadline, "no readable generation within 10 s: {}", stats.body);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A lookup through the router: (status, body).
async fn lookup(origin: &Embedded, filter: &str, k: &str) -> (StatusCode, Value) {
    let answer = origin.send(Method::GET, &paths::key(filter, k), None, None).await;
    (answer.status, answer.json())
}

fn is_no_such_filter(status: StatusCode, body: &Value) -> bool {
    status == StatusCode::NOT_FOUND && body["detail"].as_str().is_some_and(|d| d.contains("no filter named"))
}

#[tokio::test]
async fn the_list_names_every_filter_with_its_generation() {
    let origin = Embedded::start(|_| {}).await;
    let empty = origin.send(Method::GET, paths::FILTERS, Some(OPS), None).await;
    assert_eq!((empty.status, empty.body.as_str()), (StatusCode::OK, r#"{"filters":[]}"#));
    for name in ["zeta", "alpha"] {
        assert_eq!(origin.create(name).await.status, StatusCode::CREATED);
    }
    let list = origin.send(Method::GET, paths::FILTERS, Some(OPS), None).await.json();
    let names: Vec<&str> = list["filters"].as_array().unwrap().iter().map(|f| f["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["alpha", "zeta"]);
    let alpha = &list["filters"][0];
    assert_eq!((alpha["key_format"].as_str(), alpha["capacity"].as_u64()), (Some("hex:64"), Some(1000)));
    assert_eq!(alpha["generation"].as_u64(), Some(generation(&origin, "alpha").await));
    assert_eq!(alpha["dropping"], false);
    let anonymous = origin.send(Method::GET, paths::FILTERS, None, None).await;
    assert_eq!(anonymous.status, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn a_dropped_filter_is_no_filter_and_comes_back_whole_with_its_keys_kept() {
    let origin = Embedded::start(|_| {}).await;
    origin.create("f").await;
    assert_eq!(origin.put("f", &key(1)).await.status, StatusCode::CREATED);
    let first = generation(&origin, "f").await;

    let dropped = origin.send(Method::DELETE, &paths::filter("f"), Some(WRITER), None).await;
    assert_eq!(dropped.status, StatusCode::OK, "{}", dropped.body);
    assert_eq!(dropped.body, r#"{"filter":"f","dropped":true,"keys":"keep"}"#);

    // Gone: lookups, batches, writes and stats answer "no such filter", never "not seen".
    for k in [key(1), key(2)] {
        let (status, body) = lookup(&origin, "f", &k).await;
        assert!(is_no_such_filter(status, &body), "{status} {body}");
    }
    let batch = format!(r#"{{"keys":["{}"]}}"#, key(1));
    let answer = origin.send(Method::POST, &paths::lookups("f"), None, Some(&batch)).await;
    assert!(is_no_such_filter(answer.status, &answer.json()), "{}", answer.body);
    assert_eq!(answer.header("content-type"), "application/problem+json");
    assert_eq!(origin.put("f", &key(3)).await.status, StatusCode::NOT_FOUND);
    assert_eq!(origin.send(Method::GET, &paths::stats("f"), Some(WRITER), None).await.status, StatusCode::NOT_FOUND);
    let list = origin.send(Method::GET, paths::FILTERS, Some(WRITER), None).await;
    assert_eq!(list.body, r#"{"filters":[]}"#);
    let again = origin.send(Method::DELETE, &paths::filter("f"), Some(WRITER), None).await;
    assert_eq!(again.status, StatusCode::NOT_FOUND, "a drop of a filter that is gone: {}", again.body);

    // Created again: numbered after the dropped filter, built from the key the drop kept.
    let created = origin.create("f").await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);
    let second = generation(&origin, "f").await;
    assert!(second > first, "generation {second} after {first}: a segment identity would name two bit sets");
    let (status, body) = lookup(&origin, "f", &key(1)).await;
    assert_eq!((status, body["seen"].as_bool()), (StatusCode::OK, Some(true)), "{body}");
    assert_eq!(origin.put("f", &key(2)).await.status, StatusCode::CREATED);
    assert_eq!(lookup(&origin, "f", &key(2)).await.0, StatusCode::OK);
    let (status, body) = lookup(&origin, "f", &key(4)).await;
    assert_eq!((status, body["answered_by"].as_str()), (StatusCode::NOT_FOUND, Some("filter")), "{body}");
}

#[tokio::test]
async fn a_drop_that_deletes_the_keys_leaves_nothing_to_find() {
    let origin = Embedded::start(|_| {}).await;
    origin.create("f").await;
    for byte in 1..=3 {
        origin.put("f", &key(byte)).await;
    }
    let first = generation(&origin, "f").await;
    let dropped = origin.send(Method::DELETE, &format!("{}?keys=delete", paths::filter("f")), Some(WRITER), None).await;
    assert_eq!(dropped.body, r#"{"filter":"f","dropped":true,"keys":"delete","keys_deleted":3}"#);
    origin.create("f").await;
    let second = generation(&origin, "f").await;
    assert!(second > first);
    for byte in 1..=3 {
        let (status, body) = lookup(&origin, "f", &key(byte)).await;
        assert_eq!((status, body["seen"].as_bool()), (StatusCode::NOT_FOUND, Some(false)), "{body}");
    }
    let bad = origin.send(Method::DELETE, &format!("{}?keys=all", paths::filter("f")), Some(WRITER), None).await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST, "{}", bad.body);
    assert!(bad.json()["detail"].as_str().unwrap().contains("?keys=delete"), "{}", bad.body);
}

#[tokio::test]
async fn a_name_keeps_the_key_format_of_its_dropped_filter() {
    let origin = Embedded::start(|_| {}).await;
    origin.create("f").await;
    origin.send(Method::DELETE, &paths::filter("f"), Some(WRITER), None).await;
    let bytes = r#"{"capacity":1000,"fp_rate":0.01,"key_format":"bytes"}"#;
    let refused = origin.send(Method::PUT, &paths::filter("f"), Some(WRITER), Some(bytes)).await;
    assert_eq!(refused.status, StatusCode::CONFLICT, "{}", refused.body);
    assert!(refused.json()["detail"].as_str().unwrap().contains("key_format hex:64"), "{}", refused.body);
    assert_eq!(origin.send(Method::GET, paths::FILTERS, Some(OPS), None).await.body, r#"{"filters":[]}"#);
    assert_eq!(origin.create("f").await.status, StatusCode::CREATED, "the same format is welcome");
}

/// A gate over the in-process filter and a key file a test can hold puts in.
fn gate_with_held_puts(dir: &std::path::Path) -> (Arc<Gate>, Arc<Hooked>) {
    let keys = Arc::new(Hooked::open(dir));
    keys.hold_puts.store(true, Ordering::SeqCst);
    let settings = GateSettings {
        cache_ttl: Duration::from_secs(60),
        filter_enabled: true,
        max_filter_bytes: 1 << 30,
        journal_enabled: true,
        local_copy_max_bytes: 0,
        lease: bloomgate_origin::lease::LeaseSettings::OFF,
        lease_tail_every: Duration::from_millis(4),
        rebuild_lease: Duration::from_secs(30),
        write_recovery_wait: Duration::from_secs(3),
    };
    (Arc::new(Gate::new(Arc::new(MemoryFilterStore::default()), keys.clone(), settings)), keys)
}

#[tokio::test]
async fn a_write_racing_a_drop_is_never_acknowledged_into_nothing() {
    let dir = common::temp_dir();
    let (gate, keys) = gate_with_held_puts(&dir);
    let create = || CreateFilter::new(1000, 0.01);
    assert_eq!(gate.create_filter("f", create()).await.unwrap(), Created::New);

    // Dropped and created again (keys deleted) while the write waits for its database write:
    // its key could be deleted with the old filter, so it must not be acknowledged into the new.
    let write = tokio::spawn({
        let gate = gate.clone();
        async move { gate.insert("f", key(1).as_bytes(), b"").await }
    });
    keys.waiting.notified().await;
    gate.drop_filter("f", DropKeys::Delete, 1).await.unwrap();
    assert_eq!(gate.create_filter("f", create()).await.unwrap(), Created::New);
    keys.release.notify_one();
    let refused = write.await.unwrap();
    assert!(matches!(refused, Err(AppError::FilterWrite(_))), "acknowledged across a drop: {refused:?}");

    // Dropped (and not created again) while it waits: refused as a write to no filter.
    let write = tokio::spawn({
        let gate = gate.clone();
        async move { gate.insert("f", key(2).as_bytes(), b"").await }
    });
    keys.waiting.notified().await;
    gate.drop_filter("f", DropKeys::Keep, 1).await.unwrap();
    keys.release.notify_one();
    let refused = write.await.unwrap();
    assert!(matches!(refused, Err(AppError::UnknownFilter(_))), "acknowledged into a dropped filter: {refused:?}");

    // A write that lands before the drop is acknowledged, and its key is kept with the filter:
    // the filter created again is built from it and answers "seen".
    assert_eq!(gate.create_filter("g", create()).await.unwrap(), Created::New);
    let acked = tokio::spawn({
        let gate = gate.clone();
        async move { gate.insert("g", key(4).as_bytes(), b"").await }
    });
    keys.waiting.notified().await;
    keys.release.notify_one();
    acked.await.unwrap().expect("a write with no drop around it is acknowledged");
    gate.drop_filter("g", DropKeys::Keep, 1).await.unwrap();
    assert_eq!(gate.create_filter("g", create()).await.unwrap(), Created::NewFromKeys);
    let answer = gate.lookup("g", key(4).as_bytes()).await.unwrap();
    assert!(answer.seen, "a key acknowledged before a drop that kept it is seen after: {answer:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
