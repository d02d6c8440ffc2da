//! The read-only ops token: it reads a filter's stats and the filter list, and every endpoint
//! that writes refuses it with a 403 that says so, storing nothing. Writer tokens keep all they
//! could do. Runs on the embedded stores: `cargo test -p bloomgate-origin --test ops_token`.

mod common;

use axum::http::{Method, StatusCode};
use bloomgate_client::paths;
use common::{key, Embedded, OPS, WRITER};

#[tokio::test]
async fn an_ops_token_reads_stats_and_is_refused_every_write() {
    let origin = Embedded::start(|_| {}).await;
    assert_eq!(origin.create("f").await.status, StatusCode::CREATED);

    let stats = origin.send(Method::GET, &paths::stats("f"), Some(OPS), None).await;
    assert_eq!(stats.status, StatusCode::OK, "{}", stats.body);
    assert_eq!(stats.json()["filter"], "f");
    let list = origin.send(Method::GET, paths::FILTERS, Some(OPS), None).await;
    assert_eq!(list.status, StatusCode::OK, "{}", list.body);
    assert_eq!(list.json()["filters"][0]["name"], "f");

    let batch = format!(r#"{{"keys":["{}"]}}"#, key(2));
    let writes: [(Method, String, Option<&str>); 6] = [
        (Method::PUT, paths::filter("g"), Some(r#"{"capacity":10,"fp_rate":0.01}"#)),
        (Method::PUT, paths::key("f", &key(1)), None),
        (Method::POST, paths::keys("f"), Some(&batch)),
        (Method::DELETE, paths::key("f", &key(1)), None),
        (Method::POST, paths::rebuild("f"), None),
        (Method::DELETE, paths::filter("f"), None),
    ];
    for (method, path, body) in writes {
        let refused = origin.send(method.clone(), &path, Some(OPS), body).await;
        assert_eq!(refused.status, StatusCode::FORBIDDEN, "{method} {path}: {}", refused.body);
        let problem = refused.json();
        assert!(problem["detail"].as_str().unwrap().contains("ops token is read-only"), "{problem}");
        assert!(problem["hint"].as_str().unwrap().contains("writer token"), "{problem}");
    }
    // Nothing was written: no filter g, f still there, neither key stored.
    let g = origin.send(Method::GET, &paths::stats("g"), Some(WRITER), None).await;
    assert_eq!(g.status, StatusCode::NOT_FOUND);
    for k in [key(1), key(2)] {
        let lookup = origin.send(Method::GET, &paths::key("f", &k), None, None).await;
        assert_eq!((lookup.status, lookup.json()["seen"].as_bool()), (StatusCode::NOT_FOUND, Some(false)));
    }
}

#[tokio::test]
async fn writer_tokens_keep_every_right_and_unknown_tokens_have_none() {
    let origin = Embedded::start(|_| {}).await;
    assert_eq!(origin.create("f").await.status, StatusCode::CREATED);
    assert_eq!(origin.put("f", &key(1)).await.status, StatusCode::CREATED);
    let stats = origin.send(Method::GET, &paths::stats("f"), Some(WRITER), None).await;
    assert_eq!(stats.status, StatusCode::OK);

    let unknown = origin.send(Method::GET, &paths::stats("f"), Some("not-a-token-at-all-0000"), None).await;
    assert_eq!(unknown.status, StatusCode::FORBIDDEN);
    assert!(!unknown.json()["detail"].as_str().unwrap().contains("ops token"), "{}", unknown.body);
    let anonymous = origin.send(Method::GET, &paths::stats("f"), None, None).await;
    assert_eq!(anonymous.status, StatusCode::UNAUTHORIZED);
    // Lookups and metrics need no token at all.
    assert_eq!(origin.send(Method::GET, &paths::key("f", &key(1)), None, None).await.status, StatusCode::OK);
    assert_eq!(origin.send(Method::GET, paths::METRICS, None, None).await.status, StatusCode::OK);
}
