//! A delete right after a write, through two origins whose clocks differ: the answer
//! `"deleted": true` holds at once (the key reads "not seen" through either origin), and a
//! write sent after the delete's acknowledgement is never hidden by it. Both directions of the
//! skew: the writer's clock ahead of the deleter's, and the deleter's ahead of the writer's.
//!
//! One origin runs in this process; the other in a process of its own (this test binary again,
//! one ignored test) under Debian's libfaketime, its wall clock 200 ms ahead, inside the
//! origins' `delete_skew_margin_ms` of 300 ms. The skewed process checks its clock is ahead of
//! Redis's, so a libfaketime that did not load fails the test instead of proving nothing.
//!
//! # Running
//! `scripts/services start`, `apt-get install faketime`, then
//! `cargo test -p bloomgate-tests --test delete_after_write`.

use bloomgate_tests::faketime::{wall_clock_ahead_of_redis_us, with_wall_clock_off_by};
use bloomgate_tests::origin::TestOrigin;
use bloomgate_tests::{random_keys, unique_filter};
use reqwest::StatusCode;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

/// How far ahead the skewed origin's wall clock runs (libfaketime's form).
const AHEAD: &str = "+0.2";
/// The origins' bound on their clocks' difference, above the skew.
const MARGIN_MS: u64 = 300;
/// What the skewed origin prints before its base URL.
const ANNOUNCE: &str = "skewed origin at ";

async fn origin_with_margin() -> TestOrigin {
    TestOrigin::on_services(|c| c.delete_skew_margin_ms = MARGIN_MS).await
}

/// A lookup's answer: `Some(seen)`, or `None` when it was neither 200 nor 404.
async fn seen(base: &str, http: &reqwest::Client, filter: &str, key: &str) -> Option<bool> {
    let r = http.get(format!("{base}/v1/filters/{filter}/keys/{key}")).send().await.unwrap();
    match r.status() {
        StatusCode::OK => Some(true),
        StatusCode::NOT_FOUND => Some(false),
        _ => None,
    }
}

async fn send(request: reqwest::RequestBuilder) -> (StatusCode, serde_json::Value) {
    let r = request.bearer_auth(bloomgate_tests::origin::TOKEN).send().await.unwrap();
    (r.status(), r.json().await.unwrap_or_default())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delete_right_after_a_write_keeps_its_word_across_clocks_apart() {
    let here = origin_with_margin().await;
    let mut child = with_wall_clock_off_by(&mut Command::new(std::env::current_exe().unwrap()), AHEAD)
        .args(["skewed_origin", "--exact", "--ignored", "--nocapture"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the skewed origin");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let ahead = loop {
        let line = lines.next().expect("the skewed origin exited before announcing itself").unwrap();
        if let Some(base) = line.strip_prefix(ANNOUNCE) {
            break base.to_owned();
        }
    };
    let (http, filter) = (&here.http, unique_filter("delete-skew"));
    here.create_filter(&filter, 10_000, 0.01).await;
    let key_url = |base: &str, key: &str| format!("{base}/v1/filters/{filter}/keys/{key}");

    // The writer's clock ahead: its write's stamp is above the deleter's clock. A delete that
    // stamped below it would answer "deleted" and delete nothing.
    for key in random_keys(8) {
        assert_eq!(send(http.put(key_url(&ahead, &key))).await.0, StatusCode::CREATED);
        let (status, body) = send(http.delete(key_url(&here.base, &key))).await;
        assert_eq!((status, &body["deleted"]), (StatusCode::OK, &serde_json::json!(true)), "{body}");
        for base in [&here.base, &ahead] {
            assert_eq!(seen(base, http, &filter, &key).await, Some(false), "deleted, yet seen through {base}");
        }
    }
    // The deleter's clock ahead: its delete's stamp is above the writer's clock. A write sent
    // after the delete's answer must still outrank it.
    for key in random_keys(8) {
        assert_eq!(send(http.put(key_url(&here.base, &key))).await.0, StatusCode::CREATED);
        assert_eq!(send(http.delete(key_url(&ahead, &key))).await.0, StatusCode::OK);
        assert_eq!(seen(&here.base, http, &filter, &key).await, Some(false), "deleted, yet seen");
        assert_eq!(send(http.put(key_url(&here.base, &key))).await.0, StatusCode::CREATED);
        for base in [&here.base, &ahead] {
            assert_eq!(
                seen(base, http, &filter, &key).await,
                Some(true),
                "written again after the delete, hidden through {base}"
            );
        }
    }
    drop(child.stdin.take());
    assert!(child.wait().unwrap().success(), "the skewed origin failed: its output is above");
}

/// The skewed origin: a process of its own under libfaketime, serving until its stdin closes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run by a_delete_right_after_a_write_keeps_its_word_across_clocks_apart, in a process with a skewed clock"]
async fn skewed_origin() {
    let ahead_us = wall_clock_ahead_of_redis_us().await;
    assert!(
        (150_000..MARGIN_MS as i64 * 1000).contains(&ahead_us),
        "this process's clock is {ahead_us} µs off Redis's, not {AHEAD} s ahead: is libfaketime loaded?"
    );
    let origin = origin_with_margin().await;
    println!("{ANNOUNCE}{}", origin.base);
    // Serves until the test closes our stdin.
    tokio::task::spawn_blocking(|| std::io::copy(&mut std::io::stdin(), &mut std::io::sink())).await.unwrap().unwrap();
}
