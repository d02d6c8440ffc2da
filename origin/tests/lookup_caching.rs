//! Every lookup answer carries `Cache-Control: no-store` (see `bloomgate_client::caching`):
//! single (GET and HEAD) and batch, seen and not seen, and the error answers to lookups. Runs on
//! the embedded stores: `cargo test -p bloomgate-origin --test lookup_caching`.

mod common;

use axum::http::{Method, StatusCode};
use bloomgate_client::paths;
use common::{key, Embedded};

#[tokio::test]
async fn no_lookup_answer_may_be_kept_by_a_cache() {
    let origin = Embedded::start(|c| c.max_batch = 2).await;
    assert_eq!(origin.create("f").await.status, StatusCode::CREATED);
    assert_eq!(origin.put("f", &key(1)).await.status, StatusCode::CREATED);
    let batch = format!(r#"{{"keys":["{}","{}"]}}"#, key(1), key(2));
    let too_many = format!(r#"{{"keys":["{}","{}","{}"]}}"#, key(1), key(2), key(3));
    let asked: [(Method, String, Option<&str>, StatusCode); 9] = [
        (Method::GET, paths::key("f", &key(1)), None, StatusCode::OK),
        (Method::GET, paths::key("f", &key(2)), None, StatusCode::NOT_FOUND),
        (Method::HEAD, paths::key("f", &key(1)), None, StatusCode::OK),
        (Method::HEAD, paths::key("f", &key(2)), None, StatusCode::NOT_FOUND),
        (Method::POST, paths::lookups("f"), Some(&batch), StatusCode::OK),
        (Method::GET, paths::key("f", "not-hex"), None, StatusCode::BAD_REQUEST),
        (Method::GET, paths::key("missing", &key(1)), None, StatusCode::NOT_FOUND),
        (Method::POST, paths::lookups("missing"), Some(&batch), StatusCode::NOT_FOUND),
        (Method::POST, paths::lookups("f"), Some(&too_many), StatusCode::PAYLOAD_TOO_LARGE),
    ];
    for (method, path, body, status) in asked {
        let answer = origin.send(method.clone(), &path, None, body).await;
        assert_eq!(answer.status, status, "{method} {path}: {}", answer.body);
        assert_eq!(answer.header("cache-control"), "no-store", "{method} {path} {status}");
    }
}
