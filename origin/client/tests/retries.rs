//! Retries against a local server that refuses on cue: a 429 or 503 with `Retry-After` is
//! waited out in full and then answered, attempts and the total wait are bounds, an answer that
//! is not worth a retry is returned at once, and a split batch retries only the refused request.

mod support;

use bloomgate_client::{Client, Error, RetryPolicy};
use std::time::{Duration, Instant};
use support::{Refusal, Server};

const MS: Duration = Duration::from_millis(1);

/// Retries quickly unless the server asks for longer.
fn quick() -> RetryPolicy {
    RetryPolicy::default().backoff(10 * MS, 20 * MS).total_wait(Duration::from_secs(10))
}

fn busy(retry_after: u64) -> Refusal {
    Refusal { status: 429, retry_after: Some(retry_after) }
}

#[tokio::test]
async fn a_429_with_retry_after_is_waited_out_then_answered() {
    let server = Server::start(10).await;
    server.refuse_next(&[busy(1)]);
    let client = Client::new(&server.base).unwrap().with_retries(quick());
    let started = Instant::now();
    let answer = client.lookup("f", "s-key").await.unwrap();
    assert!(answer.seen);
    assert_eq!(server.requests(), 2, "refused once, answered the second time");
    assert!(started.elapsed() >= Duration::from_secs(1), "waited the 1 s asked: {:?}", started.elapsed());
}

#[tokio::test]
async fn without_retries_the_refusal_is_the_answer_with_its_wait() {
    let server = Server::start(10).await;
    server.refuse_next(&[busy(2)]);
    let err = Client::new(&server.base).unwrap().lookup("f", "s-key").await.unwrap_err();
    assert!(matches!(err, Error::Http { status: 429, .. }), "{err:?}");
    assert!(err.is_retryable());
    assert_eq!(err.retry_after(), Some(Duration::from_secs(2)));
    assert_eq!(err.problem().and_then(|p| p.hint.as_deref()), Some("Try again later."));
    assert!(err.to_string().contains("asked to wait 2 s"), "{err}");
    assert_eq!(server.requests(), 1);
}

#[tokio::test]
async fn attempts_bound_the_tries() {
    let server = Server::start(10).await;
    let unavailable = Refusal { status: 503, retry_after: None };
    server.refuse_next(&[unavailable; 5]);
    let client = Client::new(&server.base).unwrap().with_retries(quick().attempts(3));
    let err = client.lookup("f", "s-key").await.unwrap_err();
    assert_eq!(err.status(), Some(503), "{err}");
    assert_eq!(server.requests(), 3);
}

#[tokio::test]
async fn a_wait_past_the_total_is_not_shortened_the_refusal_is_returned() {
    let server = Server::start(10).await;
    server.refuse_next(&[busy(5)]);
    let client = Client::new(&server.base).unwrap().with_retries(quick().total_wait(Duration::from_secs(1)));
    let started = Instant::now();
    let err = client.lookup("f", "s-key").await.unwrap_err();
    assert_eq!(err.retry_after(), Some(Duration::from_secs(5)), "{err}");
    assert_eq!(server.requests(), 1);
    assert!(started.elapsed() < Duration::from_secs(1), "gave up at once: {:?}", started.elapsed());
}

#[tokio::test]
async fn an_answer_not_worth_a_retry_is_returned_at_once() {
    let server = Server::start(10).await;
    server.refuse_next(&[Refusal { status: 404, retry_after: None }]);
    let client = Client::new(&server.base).unwrap().with_retries(quick());
    let err = client.lookup("f", "s-key").await.unwrap_err();
    assert_eq!(err.status(), Some(404));
    assert!(!err.is_retryable());
    assert_eq!(server.requests(), 1);
}

#[tokio::test]
async fn a_split_batch_retries_only_the_refused_request() {
    let server = Server::start(3).await;
    server.refuse_request(1, busy(0));
    let client = Client::builder(&server.base).max_batch(3).build().unwrap().with_retries(quick());
    let keys = ["s1", "n2", "s3", "n4", "s5", "n6", "s7"];
    let lookups = client.lookup_batch("f", &keys).await.unwrap();
    let asked: Vec<&str> = lookups.results.iter().map(|a| a.key.as_str()).collect();
    assert_eq!(asked, keys);
    assert_eq!(server.batch_sizes(), [3, 3, 3, 1], "the second request sent twice, the others once");
    assert_eq!(server.batches()[1], server.batches()[2]);
}

#[tokio::test]
async fn a_refused_connection_is_retried_within_the_bounds_then_named() {
    // A port nothing listens on: bind one, then let it go.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let client = Client::new(&format!("http://127.0.0.1:{port}")).unwrap().with_retries(quick().attempts(2));
    let started = Instant::now();
    let err = client.lookup("f", "k").await.unwrap_err();
    assert!(matches!(err, Error::Connect { .. }), "{err:?}");
    assert!(err.is_retryable());
    let message = err.to_string();
    assert!(message.contains(&format!("cannot connect to http://127.0.0.1:{port}")), "{message}");
    assert!(message.contains("check that the server is running"), "{message}");
    assert!(started.elapsed() >= 5 * MS, "one backoff waited: {:?}", started.elapsed());
}
