//! The OpenAPI description lists every status each operation answers, and nothing it never
//! answers. Every described operation is driven, through the whole router, into each answer it
//! can give: success, every refusal of a token, a name, a key, a body or a query, conflicts,
//! overload (429) and each store down (503). The statuses seen must be exactly those the
//! description lists for the operation, every error must be a problem body (the one exception:
//! a lookup's 404 "not seen" is a key answer), and 429 and 503 carry `Retry-After`. An operation
//! added to the description that this test does not know how to drive fails it too.
//! `cargo test -p bloomgate-origin --test openapi_statuses` (`PROBE_DEBUG=1` prints every
//! request and its answer).

mod common;

use axum::http::{Method, StatusCode};
use bloomgate_client::paths;
use bloomgate_origin::store::embedded::MemoryFilterStore;
use bloomgate_origin::store::redis::{RedisFilterStore, RedisSettings};
use bloomgate_origin::store::{Database, FilterDef, FilterStore, JournalRetention};
use common::hooked::Hooked;
use common::{key, Answer, Embedded, OPS, WRITER};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// An operation: method and path pattern, as the description names it.
type Operation = (String, String);

/// One request of a probe.
struct Probe {
    method: Method,
    path: String,
    token: Option<&'static str>,
    body: Option<String>,
}

impl Probe {
    fn new(method: &Method, path: String, token: Option<&'static str>, body: Option<String>) -> Probe {
        Probe { method: method.clone(), path, token, body }
    }
}

/// How an operation is driven: its valid requests (the first one is varied by the refusals
/// every operation shares), its path with another filter name, whether it takes a writer token
/// or any token, and the refusals of its own.
struct Shape {
    valid: Vec<Probe>,
    named: fn(&str) -> String,
    writer: bool,
    secured: bool,
    own: Vec<Probe>,
}

/// Every operation the description lists, with the statuses it documents.
fn described(doc: &Value) -> BTreeMap<Operation, BTreeSet<u16>> {
    let mut out = BTreeMap::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, operation) in item.as_object().unwrap() {
            let statuses = operation["responses"].as_object().unwrap().keys().map(|s| s.parse().unwrap()).collect();
            out.insert((method.to_uppercase(), path.clone()), statuses);
        }
    }
    out
}

/// Which operation a request is.
fn operation_of(operations: &BTreeMap<Operation, BTreeSet<u16>>, method: &Method, path: &str) -> Operation {
    let path = path.split('?').next().unwrap();
    operations
        .keys()
        .find(|(m, pattern)| m == method.as_str() && paths::matches(pattern, path).is_some())
        .unwrap_or_else(|| panic!("{method} {path} is no described operation"))
        .clone()
}

/// A body no origin of this test reads whole: over its `max_body_bytes`.
fn huge() -> String {
    format!(r#"{{"keys":["{}"]}}"#, "a".repeat(20_000))
}

/// The requests that drive `operation` (on filter `f`, which holds `key(1)`) into every answer
/// of a healthy origin: its success, then each refusal that applies.
fn probes_of(operation: &Operation) -> Vec<Probe> {
    let (method, pattern) = (&operation.0.parse::<Method>().unwrap(), operation.1.as_str());
    let Shape { valid, named, writer, secured, own } = match pattern {
        paths::KEY | paths::LOOKUPS | paths::KEYS => key_shape(method, pattern),
        _ => filter_shape(method, pattern),
    };
    let mut probes = valid;
    let first = &probes[0];
    let body = first.body.clone();
    let token = first.token;
    // (Creating a filter of an unknown name is its success, not a refusal.)
    if !(pattern == paths::FILTER && method == Method::PUT) {
        probes.push(Probe::new(method, named("no-such-filter"), token, body.clone()));
    }
    probes.push(Probe::new(method, named("Bad!"), token, body.clone()));
    if secured {
        let path = named("f");
        probes.push(Probe::new(method, path.clone(), None, body.clone()));
        probes.push(Probe::new(method, path.clone(), Some("not-a-token-of-this-origin"), body.clone()));
        probes.push(Probe::new(method, path.clone(), Some("\u{7f}"), body.clone()));
        if writer {
            probes.push(Probe::new(method, path, Some(OPS), body));
        }
    }
    probes.extend(own);
    probes
}

/// The probes of the key operations (lookups, writes, deletes).
fn key_shape(method: &Method, pattern: &str) -> Shape {
    let batch = |keys: &[String]| serde_json::json!({ "keys": keys }).to_string();
    match pattern {
        paths::KEY if method == Method::GET || method == Method::HEAD => Shape {
            valid: vec![
                Probe::new(method, paths::key("f", &key(1)), None, None),
                Probe::new(method, paths::key("f", &key(2)), None, None),
            ],
            named: |f| paths::key(f, &key(1)),
            writer: false,
            secured: false,
            own: vec![Probe::new(method, paths::key("f", "not-hex"), None, None)],
        },
        paths::LOOKUPS => Shape {
            valid: vec![Probe::new(method, paths::lookups("f"), None, Some(batch(&[key(1), key(2)])))],
            named: paths::lookups,
            writer: false,
            secured: false,
            own: vec![
                Probe::new(method, paths::lookups("f"), None, Some(batch(&[key(1), key(2), key(3)]))),
                Probe::new(method, paths::lookups("f"), None, Some("{\"keys\": [1]}".into())),
                Probe::new(method, paths::lookups("f"), None, Some(huge())),
            ],
        },
        paths::KEY if method == Method::PUT => Shape {
            valid: vec![Probe::new(method, paths::key("f", &key(3)), Some(WRITER), None)],
            named: |f| paths::key(f, &key(3)),
            writer: true,
            secured: true,
            own: vec![
                Probe::new(method, paths::key("f", "not-hex"), Some(WRITER), None),
                Probe::new(method, paths::key("f", &key(4)), Some(WRITER), Some("\"a value over 8 bytes\"".into())),
            ],
        },
        paths::KEYS => Shape {
            valid: vec![Probe::new(method, paths::keys("f"), Some(WRITER), Some(batch(&[key(5)])))],
            named: paths::keys,
            writer: true,
            secured: true,
            own: vec![
                Probe::new(method, paths::keys("f"), Some(WRITER), Some(batch(&[key(5), key(6), key(7)]))),
                Probe::new(method, paths::keys("f"), Some(WRITER), Some("[]".into())),
            ],
        },
        paths::KEY if method == Method::DELETE => Shape {
            valid: vec![Probe::new(method, paths::key("f", &key(5)), Some(WRITER), None)],
            named: |f| paths::key(f, &key(5)),
            writer: true,
            secured: true,
            own: vec![Probe::new(method, paths::key("f", "not-hex"), Some(WRITER), None)],
        },
        other => panic!("{method} {other}: an operation this test does not drive; teach key_shape its requests"),
    }
}

/// The probes of the filter operations (create, drop, stats, rebuild, list).
fn filter_shape(method: &Method, pattern: &str) -> Shape {
    let create = r#"{"capacity":1000,"fp_rate":0.01}"#.to_owned();
    match pattern {
        paths::FILTER if method == Method::PUT => Shape {
            valid: vec![
                Probe::new(method, paths::filter("new"), Some(WRITER), Some(create.clone())),
                Probe::new(method, paths::filter("f"), Some(WRITER), Some(create.clone())),
            ],
            named: paths::filter,
            writer: true,
            secured: true,
            own: vec![
                Probe::new(method, paths::filter("f"), Some(WRITER), Some(r#"{"capacity":5,"fp_rate":0.01}"#.into())),
                Probe::new(method, paths::filter("x"), Some(WRITER), Some(r#"{"capacity":5,"fp_rate":2}"#.into())),
                Probe::new(method, paths::filter("x"), Some(WRITER), Some(huge())),
            ],
        },
        paths::FILTER if method == Method::DELETE => Shape {
            valid: vec![Probe::new(method, paths::filter("d"), Some(WRITER), None)],
            named: paths::filter,
            writer: true,
            secured: true,
            own: vec![Probe::new(method, format!("{}?keys=all", paths::filter("f")), Some(WRITER), None)],
        },
        paths::STATS => Shape {
            valid: vec![
                Probe::new(method, paths::stats("f"), Some(OPS), None),
                Probe::new(method, paths::stats("f"), Some(WRITER), None),
            ],
            named: paths::stats,
            writer: false,
            secured: true,
            own: vec![],
        },
        paths::REBUILD => Shape {
            valid: vec![Probe::new(method, paths::rebuild("r"), Some(WRITER), None)],
            named: paths::rebuild,
            writer: true,
            secured: true,
            own: vec![
                Probe::new(method, paths::rebuild("busy"), Some(WRITER), None),
                Probe::new(method, paths::rebuild("f"), Some(WRITER), Some(r#"{"fp_rate":2}"#.into())),
                Probe::new(method, paths::rebuild("f"), Some(WRITER), Some(huge())),
            ],
        },
        paths::FILTERS => Shape {
            valid: vec![Probe::new(method, paths::FILTERS.into(), Some(OPS), None)],
            named: |_| paths::FILTERS.into(),
            writer: false,
            secured: true,
            own: vec![],
        },
        other => panic!("{method} {other}: an operation this test does not drive; teach filter_shape its requests"),
    }
}

/// Sends a probe; a `\u{7f}` token stands for a malformed Authorization header.
async fn send(origin: &Embedded, probe: &Probe) -> Answer {
    match probe.token {
        Some("\u{7f}") => {
            use tower::ServiceExt;
            let request = axum::http::Request::builder()
                .method(probe.method.clone())
                .uri(&probe.path)
                .header("authorization", "Basic d3JpdGVy")
                .body(axum::body::Body::empty())
                .unwrap();
            let response = origin.app.clone().oneshot(request).await.unwrap();
            let (parts, body) = response.into_parts();
            let bytes = axum::body::to_bytes(body, usize::MAX).await.unwrap();
            Answer { status: parts.status, headers: parts.headers, body: String::from_utf8_lossy(&bytes).into_owned() }
        }
        token => origin.send(probe.method.clone(), &probe.path, token, probe.body.as_deref()).await,
    }
}

/// Records what `origin` answers to `probes`, checking the shape of each error answer.
async fn record(origin: &Embedded, ops: &BTreeMap<Operation, BTreeSet<u16>>, probes: &[Probe], seen: &mut Seen) {
    for probe in probes {
        let answer = send(origin, probe).await;
        let status = answer.status.as_u16();
        let operation = operation_of(ops, &probe.method, &probe.path);
        let what = format!("{} {} -> {status}: {}", probe.method, probe.path, answer.body);
        let key_answer = status == 404 && probe.method == Method::GET && answer.json_or_null()["seen"] == false;
        if status >= 400 && !key_answer && probe.method != Method::HEAD {
            assert_eq!(answer.header("content-type"), "application/problem+json", "{what}");
            assert_eq!(answer.json()["status"], status, "{what}");
        }
        if status == 429 || status == 503 {
            assert!(!answer.header("retry-after").is_empty(), "{what}");
        }
        if std::env::var("PROBE_DEBUG").is_ok() {
            eprintln!("{what}");
        }
        seen.entry(operation).or_default().insert(status);
    }
}

type Seen = BTreeMap<Operation, BTreeSet<u16>>;

/// Filter `f` holding `key(1)`, throwaway filters `d` to drop and `r` to rebuild, and `busy`,
/// whose rebuild lease someone else holds.
async fn prepare(origin: &Embedded) {
    for name in ["f", "busy", "d", "r"] {
        assert_eq!(origin.create(name).await.status, StatusCode::CREATED);
    }
    assert_eq!(origin.put("f", &key(1)).await.status, StatusCode::CREATED);
    let lease = origin.state.gate.filter_store().lease("busy", "another-origin", Duration::from_secs(600)).await;
    assert!(lease.unwrap());
}

#[tokio::test]
async fn the_description_lists_exactly_the_statuses_each_operation_answers() {
    let healthy = Embedded::start(|c| {
        c.max_batch = 2;
        c.max_value_bytes = 8;
    })
    .await;
    let doc = healthy.send(Method::GET, paths::OPENAPI, None, None).await.json();
    let ops = described(&doc);
    let mut seen = Seen::new();

    // A healthy origin: successes and every refusal.
    prepare(&healthy).await;
    for operation in ops.keys() {
        record(&healthy, &ops, &probes_of(operation), &mut seen).await;
    }

    database_down(&ops, &mut seen).await;
    filter_store_down(&ops, &mut seen).await;
    overloaded(&ops, &mut seen).await;
    let wrong = mismatches(&ops, &seen);
    assert!(wrong.is_empty(), "the description and the answers differ:\n{}", wrong.join("\n"));
}

/// The database down (definitions cached before it went): 503 wherever it is needed.
async fn database_down(ops: &BTreeMap<Operation, BTreeSet<u16>>, seen: &mut Seen) {
    let dir = common::temp_dir();
    let keys = Arc::new(Hooked::open(&dir));
    let down = Embedded::over(dir, Arc::new(MemoryFilterStore::default()), keys.clone(), |c| c.meta_cache_ms = 600_000);
    prepare(&down).await;
    keys.down.store(true, Ordering::SeqCst);
    for operation in ops.keys() {
        record(&down, ops, &probes_of(operation)[..1], seen).await;
    }
}

/// The filter store down (nothing listens where it is said to be), the database up.
async fn filter_store_down(ops: &BTreeMap<Operation, BTreeSet<u16>>, seen: &mut Seen) {
    let dir = common::temp_dir();
    let keys = Arc::new(Hooked::open(&dir));
    for name in ["f", "d", "r"] {
        let def = FilterDef {
            name: name.into(),
            key_format: bloomgate_filter::KeyFormat::SHA256_HEX,
            capacity: 1000,
            fp_rate: 0.01,
            segment_bytes: 65536,
        };
        keys.create_filter(&def).await.unwrap();
    }
    let nowhere = RedisSettings {
        journal: JournalRetention { max_entries: 10, max_age: Duration::from_secs(10) },
        url: "redis://127.0.0.1:1/".into(),
        cluster_nodes: Vec::new(),
        min_replicas_acked: 0,
        timeout: Duration::from_millis(50),
        write_timeout: Duration::from_millis(50),
        access: Default::default(),
    };
    let filters: Arc<dyn FilterStore> = Arc::new(RedisFilterStore::connect(&nowhere).await.unwrap());
    let no_filter_store = Embedded::over(dir, filters, keys, |_| {});
    for operation in ops.keys() {
        record(&no_filter_store, ops, &probes_of(operation)[..1], seen).await;
    }
}

/// Overloaded: the cap of each class is one, and each has one request in flight, held in the
/// database (a lookup, and a write: lookups are admitted apart from writes and batches).
async fn overloaded(ops: &BTreeMap<Operation, BTreeSet<u16>>, seen: &mut Seen) {
    let dir = common::temp_dir();
    let keys = Arc::new(Hooked::open(&dir));
    let busy = Arc::new(Embedded::over(dir, Arc::new(MemoryFilterStore::default()), keys.clone(), |c| {
        c.max_in_flight = 1;
        c.filter_enabled = false;
    }));
    prepare(&busy).await;
    keys.hold_gets.store(true, Ordering::SeqCst);
    let held_lookup = tokio::spawn({
        let busy = busy.clone();
        async move { busy.send(Method::GET, &paths::key("f", &key(1)), None, None).await.status }
    });
    keys.waiting.notified().await;
    keys.hold_puts.store(true, Ordering::SeqCst);
    let held_write = tokio::spawn({
        let busy = busy.clone();
        async move { busy.put("f", &key(2)).await.status }
    });
    keys.waiting.notified().await;
    for operation in ops.keys() {
        record(&busy, ops, &probes_of(operation)[..1], seen).await;
    }
    keys.hold_gets.store(false, Ordering::SeqCst);
    keys.hold_puts.store(false, Ordering::SeqCst);
    keys.release.notify_one();
    keys.release.notify_one();
    assert_eq!(held_lookup.await.unwrap(), StatusCode::OK);
    assert_eq!(held_write.await.unwrap(), StatusCode::CREATED);
}

/// Each operation whose answers and description differ, and how.
fn mismatches(ops: &BTreeMap<Operation, BTreeSet<u16>>, seen: &Seen) -> Vec<String> {
    let mut wrong = Vec::new();
    for (operation, documented) in ops {
        let answered = seen.get(operation).cloned().unwrap_or_default();
        let undocumented: Vec<&u16> = answered.difference(documented).collect();
        let never: Vec<&u16> = documented.difference(&answered).collect();
        if !undocumented.is_empty() || !never.is_empty() {
            wrong.push(format!(
                "{} {}: answers {undocumented:?} undescribed; describes {never:?} never answered",
                operation.0, operation.1
            ));
        }
    }
    wrong
}
