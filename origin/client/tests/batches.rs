//! Batches of any length against a local server with a small `max_batch`: split into requests
//! of at most that many keys, answers joined in the order asked, the server's limit learnt from
//! its refusal, and what a write that fails partway has stored.

mod support;

use bloomgate_client::{Client, Error};
use support::{Refusal, Server};

/// Seven keys, the ones starting with `s` "seen" by the stand-in.
fn seven() -> Vec<String> {
    ["s1", "n2", "s3", "n4", "n5", "s6", "n7"].map(String::from).to_vec()
}

#[tokio::test]
async fn a_batch_over_max_batch_is_split_and_answered_in_order() {
    let server = Server::start(3).await;
    let client = Client::builder(&server.base).max_batch(3).build().unwrap();
    let keys = seven();
    let lookups = client.lookup_batch("f", &keys).await.unwrap();
    assert_eq!(server.batch_sizes(), [3, 3, 1], "three requests of at most 3 keys");
    assert_eq!(server.batches().concat(), keys, "every key asked once, in order");
    let answered: Vec<(&str, bool)> = lookups.results.iter().map(|a| (a.key.as_str(), a.seen)).collect();
    assert_eq!(
        answered,
        [("s1", true), ("n2", false), ("s3", true), ("n4", false), ("n5", false), ("s6", true), ("n7", false)]
    );
    assert_eq!(lookups.filter, "f");
}

#[tokio::test]
async fn writes_are_split_and_counted_whole() {
    let server = Server::start(3).await;
    let client = Client::builder(&server.base).max_batch(3).build().unwrap();
    let keys = ["a", "b", "c", "d", "e", "f", "g"];
    let stored = client.insert_batch("f", &keys).await.unwrap();
    assert_eq!(stored.stored, 7);
    assert_eq!(server.batch_sizes(), [3, 3, 1]);
}

#[tokio::test]
async fn the_server_s_limit_is_learnt_from_its_refusal() {
    let server = Server::start(3).await;
    let client = Client::new(&server.base).unwrap();
    assert_eq!(client.max_batch(), 1000);
    let lookups = client.lookup_batch("f", &seven()).await.unwrap();
    assert_eq!(server.batch_sizes(), [7, 3, 3, 1], "refused whole (413), then sent at the server's limit");
    assert_eq!(lookups.results.len(), 7);
    assert_eq!(client.max_batch(), 3);
    let clone = client.clone();
    clone.lookup_batch("f", &["a", "b", "c", "d"]).await.unwrap();
    assert_eq!(server.batch_sizes()[4..], [3, 1], "clones share what was learnt");
}

#[tokio::test]
async fn an_empty_batch_is_still_asked() {
    let server = Server::start(3).await;
    let client = Client::new(&server.base).unwrap();
    let none: [&str; 0] = [];
    assert!(client.lookup_batch("f", &none).await.unwrap().results.is_empty());
    assert_eq!(server.batch_sizes(), [0], "one request, so an unknown filter would still be an error");
}

#[tokio::test]
async fn a_write_that_fails_partway_returns_the_error_after_storing_the_requests_before() {
    let server = Server::start(3).await;
    let client = Client::builder(&server.base).max_batch(3).build().unwrap();
    server.refuse_request(1, Refusal { status: 400, retry_after: None });
    let keys = seven();
    let result = client.insert_batch("f", &keys).await;
    let err = result.unwrap_err();
    assert!(matches!(err, Error::Http { status: 400, .. }), "{err:?}");
    assert_eq!(server.batch_sizes(), [3, 3], "stopped at the refused request; the first was stored");
    // Sending the same batch again is the remedy: writes are idempotent.
    assert_eq!(client.insert_batch("f", &keys).await.unwrap().stored, 7);
}
