//! `bloomgate-client` against the edge under `wrangler dev` and against the origin: the same
//! calls read both. Single lookups (seen, and not seen answered by the edge itself), batch
//! lookups, HEAD (`exists`), an unknown filter as an error and not a "not seen", `Cache-Control:
//! no-store` on every lookup answer, and a filter dropped and created again, which the edge
//! follows within its freshness bound.
//!
//! # Running
//! `scripts/services start` and `scripts/edge-build` (builds the worker, installs wrangler),
//! then `cargo test -p bloomgate-tests --test client_edge -- --test-threads 1`.
//! `scripts/test` does all of it.

use bloomgate_client::api::{AnsweredBy, CreateFilter, DropKeys};
use bloomgate_client::{Client, Error};
use bloomgate_tests::edge::{edge_stack, EdgeStack};
use bloomgate_tests::{random_keys, unique_filter};
use std::time::{Duration, Instant};

/// The freshness bound S the edge runs with in this test.
const FRESHNESS_SECS: u32 = 3;

/// A client of `base` that drops idle connections before wrangler's Node proxy closes them
/// (its keep-alive timeout is 5 s): a request sent on one it is closing would fail for no
/// reason of the test's.
fn client_of(base: &str) -> Client {
    Client::builder(base).pool_idle_timeout(Duration::from_secs(2)).build().unwrap()
}

/// Looks `keys` up until one is answered by the edge itself (its segment held), for at most
/// 10 s; every answer must be "not seen". The key the edge answered.
async fn an_edge_no(edge: &Client, filter: &str, keys: &[String]) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        for key in keys {
            let answer = edge.lookup(filter, key).await.unwrap();
            assert!(!answer.seen, "an absent key answered seen: {answer:?}");
            if answer.answered_by == AnsweredBy::Edge {
                return key.clone();
            }
        }
        assert!(Instant::now() < deadline, "no lookup answered by the edge within 10 s");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_reads_the_edge_and_the_origin_alike() {
    let EdgeStack { origin, proxy: _proxy, edge } = edge_stack(FRESHNESS_SECS, |_| {}).await;
    let filter = unique_filter("client-edge");
    origin.client.create_filter(&filter, &CreateFilter::new(10_000, 0.01)).await.unwrap();
    let present = random_keys(20);
    origin.insert_all(&filter, &present).await;
    let absent = random_keys(20);
    let at_edge = client_of(&edge.base);

    // Single lookups: a stored key (the edge forwards it: the origin's answer, relayed) and an
    // absent one the edge rules out itself.
    let seen = at_edge.lookup(&filter, &present[0]).await.unwrap();
    assert!(seen.seen && seen.answered_by == AnsweredBy::Database, "{seen:?}");
    let no = an_edge_no(&at_edge, &filter, &absent).await;

    // HEAD: the same answers without a body, who answered in the header.
    let head = at_edge.exists(&filter, &no).await.unwrap();
    assert_eq!((head.seen, head.answered_by), (false, AnsweredBy::Edge));
    let head = at_edge.exists(&filter, &present[1]).await.unwrap();
    assert_eq!((head.seen, head.answered_by), (true, AnsweredBy::Database));

    // Batches: answers in the order asked, the edge's "no"s among them.
    let mut asked = present[..5].to_vec();
    asked.extend_from_slice(&absent);
    let batch = at_edge.lookup_batch(&filter, &asked).await.unwrap();
    assert_eq!(batch.results.len(), asked.len());
    for (answer, key) in batch.results.iter().zip(&asked) {
        assert_eq!(&answer.key, key);
        assert_eq!(answer.seen, present.contains(key), "{answer:?}");
    }
    assert!(batch.results.iter().any(|a| a.answered_by == AnsweredBy::Edge), "{:?}", batch.results);

    // An unknown filter is an error with a problem, not a "not seen".
    let missing = unique_filter("client-edge-none");
    let err = at_edge.lookup(&missing, &absent[0]).await.unwrap_err();
    let Error::Http { status: 404, problem: Some(problem), .. } = &err else { panic!("a 404 problem: {err:?}") };
    assert!(problem.detail.contains(&missing), "{problem:?}");
    assert_eq!(at_edge.exists(&missing, &absent[0]).await.unwrap_err().status(), Some(404));

    // The origin, with the same calls: its filter says "no", the database "seen".
    let at_origin = client_of(&origin.base);
    let seen = at_origin.lookup(&filter, &present[0]).await.unwrap();
    assert!(seen.seen && seen.answered_by == AnsweredBy::Database);
    let no = at_origin.lookup(&filter, &absent[0]).await.unwrap();
    assert!(!no.seen && no.answered_by == AnsweredBy::Filter, "{no:?}");
    let head = at_origin.exists(&filter, &absent[0]).await.unwrap();
    assert_eq!((head.seen, head.answered_by), (false, AnsweredBy::Filter));
    let batch = at_origin.lookup_batch(&filter, &asked).await.unwrap();
    assert_eq!(
        batch.results.iter().map(|a| a.seen).collect::<Vec<_>>(),
        asked.iter().map(|k| present.contains(k)).collect::<Vec<_>>()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_lookup_answer_of_the_edge_may_be_kept_by_a_cache() {
    let EdgeStack { origin, proxy: _proxy, edge } = edge_stack(FRESHNESS_SECS, |_| {}).await;
    let filter = unique_filter("edge-caching");
    origin.client.create_filter(&filter, &CreateFilter::new(10_000, 0.01)).await.unwrap();
    let present = random_keys(5);
    origin.insert_all(&filter, &present).await;
    let absent = random_keys(20);
    let no = an_edge_no(&client_of(&edge.base), &filter, &absent).await;
    let http = reqwest::Client::new();
    let url = |filter: &str, key: &str| format!("{}{}", edge.base, bloomgate_client::paths::key(filter, key));
    let lookups = bloomgate_client::paths::lookups(&filter);
    let answers = [
        ("seen, relayed", http.get(url(&filter, &present[0])).send().await.unwrap()),
        ("not seen, by the edge", http.get(url(&filter, &no)).send().await.unwrap()),
        ("HEAD not seen", http.head(url(&filter, &no)).send().await.unwrap()),
        ("bad key", http.get(url(&filter, "not-hex")).send().await.unwrap()),
        ("no such filter", http.get(url(&unique_filter("none"), &no)).send().await.unwrap()),
        (
            "batch",
            http.post(format!("{}{lookups}", edge.base))
                .json(&serde_json::json!({ "keys": [present[1], no] }))
                .send()
                .await
                .unwrap(),
        ),
    ];
    for (what, answer) in answers {
        assert_eq!(
            answer.headers().get("cache-control").map(|v| v.to_str().unwrap()),
            Some("no-store"),
            "{what}: {}",
            answer.status()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_edge_follows_a_filter_dropped_and_created_again() {
    let EdgeStack { origin, proxy: _proxy, edge } = edge_stack(FRESHNESS_SECS, |_| {}).await;
    let filter = unique_filter("edge-drop");
    let create = CreateFilter::new(10_000, 0.01);
    origin.client.create_filter(&filter, &create).await.unwrap();
    origin.insert_all(&filter, &random_keys(10)).await;
    let at_edge = client_of(&edge.base);
    let absent = random_keys(20);
    an_edge_no(&at_edge, &filter, &absent).await; // the edge holds the filter's manifest and a segment

    // Dropped: within S the edge answers "no such filter" (a problem), never a "not seen" after.
    origin.client.drop_filter(&filter, DropKeys::Delete).await.unwrap();
    let dropped = Instant::now();
    loop {
        match at_edge.lookup(&filter, &absent[0]).await {
            Err(Error::Http { status: 404, problem: Some(_), .. }) => break,
            Ok(answer) => assert!(!answer.seen),
            Err(e) if e.is_retryable() => {}
            Err(e) => panic!("{e}"),
        }
        assert!(
            dropped.elapsed() < Duration::from_secs(u64::from(FRESHNESS_SECS) + 2),
            "the edge still answers for a dropped filter past S"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Created again, and a key written: seen at the edge within S, although the edge held
    // segments of the dropped filter (the new generations are numbered after its).
    origin.client.create_filter(&filter, &create).await.unwrap();
    let fresh = random_keys(10);
    origin.insert_all(&filter, &fresh).await;
    let written = Instant::now();
    for key in &fresh {
        loop {
            match at_edge.lookup(&filter, key).await {
                Ok(answer) if answer.seen => break,
                Ok(_) | Err(_) => {
                    assert!(
                        written.elapsed() <= Duration::from_secs(u64::from(FRESHNESS_SECS) + 1),
                        "{key} not seen at the edge past S after the filter was created again"
                    );
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    }
}
