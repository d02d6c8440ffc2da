//! `bloomgate-client` over HTTPS: an origin as the quick start runs it (the filter in process,
//! keys in an embedded file) behind a TLS terminator whose certificate a CA of the test's own
//! signed. With that CA the client makes every call over `https://`; without it the call fails
//! with a TLS error that names the certificate and what to do; an `http://` URL aimed at the
//! TLS port, and an `https://` URL aimed at the plain port, fail saying which scheme to use.
//!
//! # Running
//! No services needed: `cargo test -p bloomgate-tests --test client_https`.

use bloomgate_client::api::{AnsweredBy, CreateFilter};
use bloomgate_client::{Client, Error};
use bloomgate_tests::origin::{TestOrigin, TOKEN};
use bloomgate_tests::random_keys;
use bloomgate_tests::tls_front::TlsFront;

/// A quick-start origin and a TLS front for it.
async fn origin_behind_tls() -> (TestOrigin, TlsFront) {
    let origin = TestOrigin::quick_start(|_| {}).await;
    let front = TlsFront::start(origin.base.trim_start_matches("http://")).await;
    (origin, front)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_ca_every_call_goes_over_https() {
    let (_origin, front) = origin_behind_tls().await;
    let client = Client::builder(&front.base).add_root_pem(front.ca_pem.as_bytes()).token(TOKEN).build().unwrap();
    let created = client.create_filter("https", &CreateFilter::new(10_000, 0.01)).await.unwrap();
    assert_eq!(created.filter, "https");

    let keys = random_keys(2_500);
    assert!(client.insert("https", &keys[0], b"one").await.unwrap().stored);
    let seen = client.lookup("https", &keys[0]).await.unwrap();
    assert!(seen.seen && seen.answered_by == AnsweredBy::Database, "{seen:?}");
    let absent = random_keys(1).remove(0);
    let not_seen = client.lookup("https", &absent).await.unwrap();
    assert!(!not_seen.seen && not_seen.answered_by == AnsweredBy::Filter, "{not_seen:?}");
    assert!(!client.exists("https", &absent).await.unwrap().seen);

    // A batch over the origin's max_batch (1000): three requests, one answer per key in order.
    assert_eq!(client.insert_batch("https", &keys[1..]).await.unwrap().stored, 2_499);
    let mut asked: Vec<&str> = keys.iter().map(String::as_str).collect();
    asked.push(&absent);
    let lookups = client.lookup_batch("https", &asked).await.unwrap();
    let answered: Vec<&str> = lookups.results.iter().map(|a| a.key.as_str()).collect();
    assert_eq!(answered, asked);
    let seen: Vec<bool> = lookups.results.iter().map(|a| a.seen).collect();
    assert!(seen[..2_500].iter().all(|s| *s) && !seen[2_500], "every stored key seen, the absent one not");
    assert_eq!(client.list_filters().await.unwrap().filters.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ca_file_is_trusted_and_localhost_is_on_the_certificate() {
    let (_origin, front) = origin_behind_tls().await;
    let ca_file = std::env::temp_dir().join(format!("bloomgate-test-ca-{:016x}.pem", rand::random::<u64>()));
    std::fs::write(&ca_file, &front.ca_pem).unwrap();
    let client = Client::builder(&format!("https://localhost:{}", front.port)).ca_file(&ca_file).build().unwrap();
    let answer = client.lookup_batch("none", &["ab".repeat(32)]).await.unwrap_err();
    // Over TLS all the way: the origin's own answer (no such filter), not a transport error.
    assert_eq!(answer.status(), Some(404), "{answer}");
    assert!(answer.problem().is_some_and(|p| p.detail.contains("none")), "{answer}");
    let _ = std::fs::remove_file(ca_file);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_ca_the_certificate_is_refused_saying_what_to_do() {
    let (_origin, front) = origin_behind_tls().await;
    let client = Client::new(&front.base).unwrap();
    let err = client.lookup("https", &"ab".repeat(32)).await.unwrap_err();
    assert!(matches!(err, Error::Tls { .. }), "{err:?}");
    assert!(!err.is_retryable(), "a certificate not trusted stays so");
    let message = err.to_string();
    assert!(message.starts_with(&format!("TLS handshake with {} failed", front.base)), "{message}");
    assert!(message.contains("certificate") && message.contains("UnknownIssuer"), "{message}");
    assert!(message.contains("ca_file") && message.contains("--ca-file"), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_url_at_the_tls_port_says_to_use_https() {
    let (_origin, front) = origin_behind_tls().await;
    let client = Client::new(&format!("http://127.0.0.1:{}", front.port)).unwrap();
    let err = client.lookup("https", &"ab".repeat(32)).await.unwrap_err();
    assert!(matches!(err, Error::Connection { .. }), "{err:?}");
    let message = err.to_string();
    assert!(message.contains("if the server serves HTTPS on this port, use an https:// URL"), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_https_url_at_the_plain_port_says_to_use_http() {
    let (origin, _front) = origin_behind_tls().await;
    let client = Client::new(&origin.base.replace("http://", "https://")).unwrap();
    let err = client.lookup("https", &"ab".repeat(32)).await.unwrap_err();
    assert!(matches!(err, Error::Tls { .. }), "{err:?}");
    let message = err.to_string();
    assert!(message.contains("does not seem to speak TLS") && message.contains("http:// URL"), "{message}");
}
