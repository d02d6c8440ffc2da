//! The request timeout: a server slower than it fails the call with `Error::Timeout`, naming
//! the timeout that ran out and what to do.

mod support;

use bloomgate_client::{Client, Error, DEFAULT_CONNECT_TIMEOUT, DEFAULT_TIMEOUT};
use std::time::{Duration, Instant};
use support::Server;

#[tokio::test]
async fn a_server_slower_than_the_timeout_is_a_timeout_error() {
    let server = Server::start_with(10, Duration::from_secs(3)).await;
    let client = Client::builder(&server.base).timeout(Duration::from_millis(300)).build().unwrap();
    let started = Instant::now();
    let err = client.lookup("f", "k").await.unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(2), "{:?}", started.elapsed());
    let Error::Timeout { after, .. } = &err else { panic!("a timeout: {err:?}") };
    assert_eq!(*after, Duration::from_millis(300));
    assert!(err.is_retryable());
    assert!(err.to_string().contains("within 300ms") && err.to_string().contains("allow longer"), "{err}");
}

#[test]
fn the_defaults_are_the_documented_ones() {
    assert_eq!((DEFAULT_CONNECT_TIMEOUT, DEFAULT_TIMEOUT), (Duration::from_secs(5), Duration::from_secs(30)));
}
