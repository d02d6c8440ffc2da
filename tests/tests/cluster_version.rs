//! The cluster version against a real Cassandra, as an operator meets it mid-upgrade: a
//! keyspace an older release made is at version 1, and there a write stores its row alone, as
//! the older release does; `upgrade finish` refuses while a running origin does not know the
//! new version or fewer origins report than the operator says run, then raises it, and writes
//! are logged in `recent_writes` from then on; a cluster raised past what an origin knows makes
//! it refuse every change (503, saying what to do) while its lookups still answer.
//!
//! # Running
//! `scripts/services start` (Redis on 6399, Cassandra on 9042), then
//! `cargo test -p bloomgate-tests --test cluster_version`. The test makes a keyspace of its own,
//! named afresh on each run, and drops it at its end. It waits for the origin to read each
//! version it sets (every 5 s), so it takes about half a minute.

use bloomgate_filter::KeyFormat;
use bloomgate_origin::cluster_version::{Finish, FinishRefused, LiveOrigin, CLUSTER_VERSION};
use bloomgate_origin::config::Config;
use bloomgate_origin::gate::cluster::{finish_upgrade, FinishError};
use bloomgate_origin::store::cassandra::CassandraDatabase;
use bloomgate_origin::store::recent_writes::buckets_between;
use bloomgate_origin::store::Database;
use bloomgate_tests::origin::{config, TestOrigin};
use bloomgate_tests::{cassandra_addr, random_keys, redis_addr, require, unique_filter};
use reqwest::StatusCode;
use scylla::client::session::Session;
use scylla::client::session_builder::SessionBuilder;
use serde_json::Value;
use std::time::{Duration, Instant};

/// Longer than an origin takes to read a new cluster version (every 5 s), with slack for a
/// busy machine.
const READ_WITHIN: Duration = Duration::from_secs(30);

async fn cql() -> Session {
    SessionBuilder::new().known_node(cassandra_addr()).build().await.expect("a session on the test Cassandra")
}

async fn run(session: &Session, statement: &str) {
    session.query_unpaged(statement, ()).await.unwrap_or_else(|e| panic!("{statement}: {e}"));
}

/// Waits until `database` holds a live report from an origin.
async fn reported(database: &CassandraDatabase) -> Vec<LiveOrigin> {
    let deadline = Instant::now() + READ_WITHIN;
    loop {
        let reports = database.origin_reports().await.unwrap();
        if !reports.is_empty() {
            return reports;
        }
        assert!(Instant::now() < deadline, "no origin reported itself running");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The keys `filter`'s log holds for writes since `since_ms`.
async fn logged(session: &Session, keyspace: &str, filter: &str, since_ms: u64) -> Vec<Vec<u8>> {
    let mut keys = Vec::new();
    for bucket in buckets_between(since_ms, bloomgate_origin::clock::now_ms()) {
        let result = session
            .query_unpaged(
                format!("SELECT key, format FROM {keyspace}.recent_writes WHERE filter = ? AND bucket = ?"),
                (filter, bucket),
            )
            .await
            .unwrap();
        let rows: Vec<(Vec<u8>, i32)> =
            result.into_rows_result().unwrap().rows().unwrap().collect::<Result<_, _>>().unwrap();
        assert!(rows.iter().all(|(_, format)| *format == 1), "every row carries its format");
        keys.extend(rows.into_iter().map(|(key, _)| key));
    }
    keys
}

/// A key as the filters made here store it (64 hex digits, as 32 bytes).
fn normalized(key: &str) -> Vec<u8> {
    KeyFormat::SHA256_HEX.normalize(key.as_bytes()).unwrap()
}

async fn stored(session: &Session, keyspace: &str, filter: &str, key: &str) -> bool {
    let result = session
        .query_unpaged(
            format!("SELECT key FROM {keyspace}.keys WHERE filter = ? AND key = ?"),
            (filter, normalized(key)),
        )
        .await
        .unwrap();
    result.into_rows_result().unwrap().rows_num() == 1
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_follow_the_cluster_version_and_a_newer_one_stops_every_change() {
    require("Redis", &redis_addr()).await;
    require("Cassandra", &cassandra_addr()).await;
    let session = cql().await;
    let keyspace = format!("bg_cluster_{:08x}", rand::random::<u32>());
    let mut cfg: Config = config(Some(format!("redis://{}/", redis_addr())), &cassandra_addr());
    cfg.cassandra_keyspace = keyspace.clone();
    let mut settings = bloomgate_origin::cassandra_settings(&cfg).unwrap();

    // Applied whole to a new keyspace, the cluster starts at this release's version...
    let applied = CassandraDatabase::apply_schema(&settings).await.unwrap();
    assert_eq!(applied.started_cluster_at, Some(CLUSTER_VERSION), "{applied}");
    // ...and a keyspace an older release made reads as version 1 (no row), as mid-upgrade.
    run(&session, &format!("DELETE FROM {keyspace}.cluster_version WHERE scope = 'cluster'")).await;
    settings.manage_schema = false;
    let operator = CassandraDatabase::connect(&settings).await.unwrap();
    assert_eq!(operator.cluster_version().await.unwrap().version, 1);

    let origin = TestOrigin::start(cfg.clone()).await;
    origin.until_cluster_version(1, READ_WITHIN).await;
    let filter = unique_filter("cluster");
    origin.create_filter(&filter, 10_000, 0.01).await;
    let since = bloomgate_origin::clock::now_ms();
    let [before, after, refused]: [String; 3] = random_keys(3).try_into().unwrap();
    assert_eq!(origin.put(&filter, &before).await.status(), StatusCode::CREATED);
    assert!(stored(&session, &keyspace, &filter, &before).await);
    assert!(
        logged(&session, &keyspace, &filter, since).await.is_empty(),
        "under version 1 a write stores its row alone"
    );

    // upgrade finish: refused while a running origin does not know the new version, or fewer
    // origins report than the operator says run.
    let reports = reported(&operator).await;
    assert!(
        reports.iter().all(|r| r.knows == CLUSTER_VERSION && r.release == env!("CARGO_PKG_VERSION")),
        "{reports:?}"
    );
    let old = LiveOrigin {
        origin: "old-pod/1/1".into(),
        release: "0.1.9".into(),
        knows: 1,
        reported_at_ms: bloomgate_origin::clock::now_ms(),
    };
    operator.report_origin(&old).await.unwrap();
    match finish_upgrade(&operator, None).await {
        Err(FinishError::Refused(e @ FinishRefused::OriginsBehind { .. })) => {
            assert!(e.to_string().contains("old-pod/1/1"), "{e}")
        }
        other => panic!("finished with an origin behind: {other:?}"),
    }
    run(&session, &format!("DELETE FROM {keyspace}.origin_reports WHERE origin = 'old-pod/1/1'")).await;
    match finish_upgrade(&operator, Some(2)).await {
        Err(FinishError::Refused(FinishRefused::TooFewReports { live: 1, expected: 2 })) => {}
        other => panic!("finished with fewer origins reporting than run: {other:?}"),
    }
    assert_eq!(operator.cluster_version().await.unwrap().version, 1, "a refused finish changes nothing");
    assert_eq!(finish_upgrade(&operator, Some(1)).await.unwrap(), Finish::Raise { from: 1, to: CLUSTER_VERSION });
    assert_eq!(finish_upgrade(&operator, Some(1)).await.unwrap(), Finish::AlreadyCurrent(CLUSTER_VERSION));

    // From the origin's next read on, its writes are logged before they are acknowledged.
    origin.until_cluster_version(CLUSTER_VERSION, READ_WITHIN).await;
    assert_eq!(origin.put(&filter, &after).await.status(), StatusCode::CREATED);
    assert_eq!(logged(&session, &keyspace, &filter, since).await, vec![normalized(&after)]);

    // Raised past what this origin knows (a newer release finished its upgrade): it changes
    // nothing, and says what to do; its lookups still answer.
    let newer = CLUSTER_VERSION + 1;
    run(&session, &format!("UPDATE {keyspace}.cluster_version SET version = {newer} WHERE scope = 'cluster'")).await;
    origin.until_cluster_version(newer, READ_WITHIN).await;
    let put = origin.put(&filter, &refused).await;
    assert_eq!(put.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(put.headers().contains_key("retry-after"));
    let problem: Value = put.json().await.unwrap();
    let (detail, hint) = (problem["detail"].as_str().unwrap(), problem["hint"].as_str().unwrap());
    assert!(
        detail
            .contains(&format!("the cluster is at version {newer}, newer than this origin knows ({CLUSTER_VERSION})")),
        "{problem}"
    );
    assert!(hint.contains("upgrade this one"), "{problem}");
    assert!(!stored(&session, &keyspace, &filter, &refused).await, "nothing was changed");
    assert_eq!(origin.delete(&filter, &before).await.status(), StatusCode::SERVICE_UNAVAILABLE);
    let create = origin
        .http
        .put(format!("{}/v1/filters/{}", origin.base, unique_filter("refused")))
        .bearer_auth(bloomgate_tests::origin::TOKEN)
        .json(&serde_json::json!({"capacity": 1000, "fp_rate": 0.01}))
        .send()
        .await
        .unwrap();
    assert_eq!(create.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(origin.get(&filter, &before).await.status(), StatusCode::OK, "lookups still answer");
    let readyz: Value = origin.http.get(format!("{}/readyz", origin.base)).send().await.unwrap().json().await.unwrap();
    assert!(readyz["cluster"]["does"].as_str().unwrap().contains("every change is refused"), "{readyz}");
    match finish_upgrade(&operator, None).await {
        Err(FinishError::Refused(FinishRefused::ClusterNewer { found, .. })) => assert_eq!(found, newer),
        other => panic!("an older release lowered or touched a newer cluster: {other:?}"),
    }
    drop(origin);
    run(&session, &format!("DROP KEYSPACE IF EXISTS {keyspace}")).await;
}
