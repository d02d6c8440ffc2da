//! `bloomgate-client` against a live origin: every call answers its type, "not seen" is an
//! answer and not an error, error answers say whether a retry can help, keys with reserved
//! characters travel intact, and the served OpenAPI description names the client's types.
//!
//! Needs `scripts/services start` (Redis and Cassandra).

use bloomgate_client::api::{AnsweredBy, CreateFilter, Rebuild, StoredValue};
use bloomgate_client::{Client, Error};
use bloomgate_tests::origin::TestOrigin;
use bloomgate_tests::{random_keys, unique_filter};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_call_answers_its_type() {
    let origin = TestOrigin::on_services(|_| {}).await;
    let client = &origin.client;
    let filter = unique_filter("client");
    let created = client.create_filter(&filter, &CreateFilter::new(10_000, 0.01)).await.unwrap();
    assert_eq!((created.filter.as_str(), created.capacity), (filter.as_str(), Some(10_000)));
    assert_eq!(created.key_format.as_deref(), Some("hex:64"));

    let keys = random_keys(3);
    let stored = client.insert(&filter, &keys[0], b"value one").await.unwrap();
    assert!(stored.stored);
    assert_eq!(client.insert_batch(&filter, &keys[1..]).await.unwrap().stored, 2);

    let seen = client.lookup(&filter, &keys[0]).await.unwrap();
    assert!(seen.seen);
    assert_eq!(seen.answered_by, AnsweredBy::Database);
    assert_eq!(seen.value, Some(StoredValue::Text("value one".into())));
    let absent = random_keys(1).remove(0);
    let not_seen = client.lookup(&filter, &absent).await.expect("not seen is an answer (404), not an error");
    assert!(!not_seen.seen);
    let batch = client.lookup_batch(&filter, &[keys[1].clone(), absent.clone()]).await.unwrap();
    assert_eq!(batch.results.iter().map(|r| r.seen).collect::<Vec<_>>(), [true, false]);

    assert!(client.delete(&filter, &keys[2]).await.unwrap().deleted);
    assert!(!client.delete(&filter, &keys[2]).await.unwrap().deleted, "already gone");
    let stats = client.stats(&filter).await.unwrap();
    assert_eq!(stats.deletes_since_build, Some(1));
    assert!(client.rebuild(&filter, &Rebuild::default()).await.unwrap().rebuilding);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn error_answers_say_whether_to_retry_and_keys_travel_intact() {
    let origin = TestOrigin::on_services(|_| {}).await;
    let client = &origin.client;
    let missing = unique_filter("client-none");
    let err = client.stats(&missing).await.unwrap_err();
    assert_eq!(err.status(), Some(404), "{err}");
    assert!(!err.is_retryable());
    let Error::Http { problem: Some(problem), .. } = &err else { panic!("a problem body: {err:?}") };
    assert!(problem.detail.contains(&missing), "{problem:?}");
    let err = client.lookup(&missing, &random_keys(1)[0]).await.unwrap_err();
    assert_eq!(err.status(), Some(404), "an unknown filter is an error, not a 'not seen': {err}");

    // A bytes-keyed filter: keys with '/', '%', '?', spaces and non-ASCII reach it as sent.
    let filter = unique_filter("client-bytes");
    let mut create = CreateFilter::new(1_000, 0.01);
    create.key_format = "bytes".parse().unwrap();
    client.create_filter(&filter, &create).await.unwrap();
    let odd = "a/b c%2Fd?e=f#g é";
    client.insert(&filter, odd, b"").await.unwrap();
    let answer = client.lookup(&filter, odd).await.unwrap();
    assert!(answer.seen, "{answer:?}");
    assert_eq!(answer.key, odd);
    assert!(!client.lookup(&filter, "a/b c/d?e=f#g é").await.unwrap().seen, "%2F is not /");

    // Without the writer token, writes are refused, for good.
    let anonymous = Client::new(&origin.base).unwrap();
    let err = anonymous.insert(&filter, "x", b"").await.unwrap_err();
    assert_eq!(err.status(), Some(401));
    assert!(!err.is_retryable());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_served_openapi_description_names_the_client_s_types() {
    let origin = TestOrigin::on_services(|_| {}).await;
    let r = origin.http.get(format!("{}/openapi.json", origin.base)).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let doc: serde_json::Value = r.json().await.unwrap();
    assert!(doc["openapi"].as_str().unwrap().starts_with("3."));
    let schemas = &doc["components"]["schemas"];
    for name in ["KeyAnswer", "Lookups", "FilterStats", "CreateFilter", "Problem"] {
        assert!(schemas[name].is_object(), "{name}");
    }
    let answer = &schemas["KeyAnswer"]["properties"];
    for field in ["filter", "key", "seen", "answered_by", "value"] {
        assert!(answer[field].is_object(), "KeyAnswer.{field}");
    }
    assert!(doc["paths"]["/v1/filters/{filter}/keys/{key}"]["get"].is_object());
}
