//! A filter state written by a newer origin (a format this build does not read), as in the
//! middle of an upgrade: this origin never guesses at it. Lookups fall through to the database
//! and stay right; writes, rebuilds and drops are refused with a hint to finish the upgrade;
//! the recovery check does not "repair" it, and nothing this origin does overwrites it.
//!
//! # Running
//! `scripts/services start`, then `cargo test -p bloomgate-tests --test state_format`.

use bloomgate_origin::store::STATE_FORMAT;
use bloomgate_tests::origin::TestOrigin;
use bloomgate_tests::{random_keys, redis_addr, unique_filter};
use redis::AsyncCommands;
use reqwest::StatusCode;
use std::time::Duration;

/// The filter's state as stored in Redis (its `meta` key).
fn meta_key(filter: &str) -> String {
    format!("bg:{{{filter}}}:meta")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_state_from_a_newer_origin_is_refused_never_guessed_at_or_overwritten() {
    let origin = TestOrigin::on_services(|c| c.recovery_interval_ms = 200).await;
    let filter = unique_filter("format");
    origin.create_filter(&filter, 10_000, 0.01).await;
    let stored = random_keys(10);
    origin.insert_all(&filter, &stored).await;

    // A newer origin rewrites the state in format STATE_FORMAT + 1, with a field this build
    // does not know.
    let mut redis = redis::Client::open(format!("redis://{}/", redis_addr()))
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let ours: String = redis.get(meta_key(&filter)).await.unwrap();
    let (ours_format, newer_format) = (format!(r#""format":{STATE_FORMAT}"#), STATE_FORMAT + 1);
    assert!(ours.contains(&ours_format), "this build writes its format: {ours}");
    let newer = ours.replace(&ours_format, &format!(r#""format":{newer_format},"checkpoint":{{"at":1}}"#));
    let _: () = redis.set(meta_key(&filter), &newer).await.unwrap();
    // Past the origin's cache of the state.
    tokio::time::sleep(Duration::from_millis(1_500)).await;

    for key in &stored {
        assert_eq!(origin.get(&filter, key).await.status(), StatusCode::OK, "a stored key, asked of the database");
    }
    let absent = origin.get(&filter, &random_keys(1)[0]).await;
    assert_eq!(absent.status(), StatusCode::NOT_FOUND);
    assert_eq!(absent.headers()["x-bloomgate-answered-by"], "database", "no bits of an unknown format are read");
    assert!(origin.metric(r#"bloomgate_filter_fallthroughs_total{reason="unknown_format"}"#).await >= 1.0);

    let write = origin.put(&filter, &random_keys(1)[0]).await;
    assert_eq!(write.status(), StatusCode::SERVICE_UNAVAILABLE, "a write into a state of an unknown format");
    assert!(write.headers().contains_key("retry-after"));
    let body: serde_json::Value = write.json().await.unwrap();
    assert!(body["hint"].as_str().unwrap_or_default().contains("upgrade"), "{body}");
    let rebuild = origin
        .http
        .post(format!("{}/v1/filters/{filter}/rebuild", origin.base))
        .bearer_auth(bloomgate_tests::origin::TOKEN)
        .send()
        .await
        .unwrap();
    // Refused now, or started and refused when it would name a generation: either way the
    // state below is untouched.
    assert!(matches!(rebuild.status(), StatusCode::ACCEPTED | StatusCode::SERVICE_UNAVAILABLE), "{}", rebuild.status());

    // Several recovery rounds (and the rebuild asked for) later, the newer state is untouched.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after: String = redis.get(meta_key(&filter)).await.unwrap();
    assert_eq!(after, newer, "this origin overwrote a state it cannot read");
}
