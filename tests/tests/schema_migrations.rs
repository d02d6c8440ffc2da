//! The Cassandra schema's versions against a real Cassandra: `schema apply` (the library call
//! the command runs) creates a keyspace and brings it to this build's version, and run again
//! does nothing; an origin that applies no schema (`cassandra_manage_schema = false`) starts
//! ready on it, and refuses, saying what to do, a keyspace behind (migration 1 only, applied by
//! hand), ahead (a version recorded past this build's that older builds would misread; one that
//! only added what this build never touches lets it run), made by hand without versions and
//! lacking a column, or missing with no replication to create it with; a filter definition in a
//! format newer than this build reads makes that filter's lookups 503, never 404, and leaves
//! the other filters alone.
//!
//! # Running
//! `scripts/services start` (Redis on 6399, Cassandra on 9042), then
//! `cargo test -p bloomgate-tests --test schema_migrations`. Every test makes keyspaces of its
//! own, named afresh on each run (so a rerun starts clean), and drops them at its end.

use bloomgate_origin::config::Config;
use bloomgate_origin::store::cassandra::migrations::{self, SCHEMA_VERSION};
use bloomgate_origin::store::cassandra::{CassandraDatabase, CassandraSettings};
use bloomgate_tests::origin::{config, TestOrigin, SINGLE_NODE_REPLICATION};
use bloomgate_tests::{cassandra_addr, random_keys, redis_addr, require, unique_filter};
use reqwest::StatusCode;
use scylla::client::session::Session;
use scylla::client::session_builder::SessionBuilder;
use serde_json::Value;
use std::time::{Duration, Instant};

/// How long an origin may take to say why its database is not connected (its first attempt
/// ends before it starts serving; this is slack for a busy machine).
const READINESS_WITHIN: Duration = Duration::from_secs(30);

async fn services() {
    require("Redis", &redis_addr()).await;
    require("Cassandra", &cassandra_addr()).await;
}

fn keyspace() -> String {
    format!("bg_schema_{:08x}", rand::random::<u32>())
}

/// A test origin's config on `keyspace`, applying its schema or not.
fn on_keyspace(keyspace: &str, manage_schema: bool) -> Config {
    let mut cfg = config(Some(format!("redis://{}/", redis_addr())), &cassandra_addr());
    cfg.cassandra_keyspace = keyspace.into();
    cfg.cassandra_manage_schema = manage_schema;
    cfg
}

/// What `bloomgate-origin schema apply` connects with, for `cfg`.
fn settings(cfg: &Config) -> CassandraSettings {
    bloomgate_origin::cassandra_settings(cfg).expect("the test settings")
}

/// A session of the test's own, for the CQL an operator would type.
async fn cql() -> Session {
    SessionBuilder::new().known_node(cassandra_addr()).build().await.expect("a session on the test Cassandra")
}

async fn run(session: &Session, statement: &str) {
    session.query_unpaged(statement, ()).await.unwrap_or_else(|e| panic!("{statement}: {e}"));
    session.await_schema_agreement().await.unwrap();
}

async fn keyspace_exists(session: &Session, keyspace: &str) -> bool {
    let result = session
        .query_unpaged("SELECT keyspace_name FROM system_schema.keyspaces WHERE keyspace_name = ?", (keyspace,))
        .await
        .unwrap();
    result.into_rows_result().unwrap().rows_num() > 0
}

async fn drop_keyspace(session: &Session, keyspace: &str) {
    run(session, &format!("DROP KEYSPACE IF EXISTS {keyspace}")).await;
}

/// Readiness's `database` once it is not "not connected yet", or the last body after the wait.
async fn database_readiness(origin: &TestOrigin, done: impl Fn(&str) -> bool) -> Result<String, Value> {
    let deadline = Instant::now() + READINESS_WITHIN;
    loop {
        let r = origin.http.get(format!("{}/readyz", origin.base)).send().await.unwrap();
        let body: Value = r.json().await.unwrap();
        let database = body["database"].as_str().unwrap_or_default();
        if done(database) {
            return Ok(database.to_owned());
        }
        if Instant::now() > deadline {
            return Err(body);
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The reason an origin started on `cfg` gives for not using its database.
async fn refusal(cfg: Config) -> String {
    let origin = TestOrigin::start(cfg).await;
    let why = database_readiness(&origin, |db| db != "ok" && !db.contains("not connected yet")).await;
    let why = why.unwrap_or_else(|last| panic!("the origin never said why: {last}"));
    let lookup = origin.get(&unique_filter("refused"), &random_keys(1)[0]).await;
    assert_eq!(lookup.status(), StatusCode::SERVICE_UNAVAILABLE, "no database, no answer but 503");
    why
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_twice_then_an_origin_that_applies_no_schema_starts_ready() {
    services().await;
    let (session, ks) = (cql().await, keyspace());
    let cfg = on_keyspace(&ks, false);

    let first = CassandraDatabase::apply_schema(&settings(&cfg)).await.unwrap();
    assert!(first.created_keyspace, "{first}");
    let versions: Vec<u32> = first.applied.iter().map(|(v, _)| *v).collect();
    assert_eq!(versions, (1..=SCHEMA_VERSION).collect::<Vec<_>>(), "{first}");
    assert_eq!(first.version, SCHEMA_VERSION);
    eprintln!("first apply:\n{first}");
    let second = CassandraDatabase::apply_schema(&settings(&cfg)).await.unwrap();
    assert!(!second.created_keyspace && second.applied.is_empty(), "{second}");
    assert_eq!(second.to_string(), format!("keyspace {ks} is up to date at version {SCHEMA_VERSION}"));

    let rows = session
        .query_unpaged(format!("SELECT version, description, applied_at FROM {ks}.schema_migrations"), ())
        .await
        .unwrap();
    let mut rows: Vec<(i32, String, Option<scylla::value::CqlTimestamp>)> =
        rows.into_rows_result().unwrap().rows().unwrap().collect::<Result<_, _>>().unwrap();
    rows.sort_by_key(|(version, ..)| *version);
    assert_eq!(rows.len(), migrations::MIGRATIONS.len(), "one row per migration, recorded once");
    for ((version, description, applied_at), migration) in rows.iter().zip(migrations::MIGRATIONS) {
        assert_eq!((*version as u32, description.as_str()), (migration.version, migration.description));
        assert!(applied_at.is_some(), "version {version} records when it was applied");
    }

    let origin = TestOrigin::start(cfg).await;
    let ready = database_readiness(&origin, |db| db == "ok").await;
    ready.unwrap_or_else(|last| panic!("an origin on the applied schema is not ready on its database: {last}"));
    let filter = unique_filter("applied");
    origin.create_filter(&filter, 10_000, 0.01).await;
    let keys = random_keys(3);
    origin.insert_all(&filter, &keys).await;
    assert_eq!(origin.get(&filter, &keys[0]).await.status(), StatusCode::OK);
    let format: (Option<i32>,) = session
        .query_unpaged(format!("SELECT format FROM {ks}.filters WHERE name = ?"), (&filter,))
        .await
        .unwrap()
        .into_rows_result()
        .unwrap()
        .first_row()
        .unwrap();
    assert_eq!(format, (Some(1),), "a definition is written with its format");
    drop(origin);
    drop_keyspace(&session, &ks).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_origin_that_applies_no_schema_refuses_one_behind_or_ahead() {
    services().await;
    let (session, ks) = (cql().await, keyspace());
    // Version 1 only, applied by hand as an operator would from an older release's script.
    run(&session, &migrations::keyspace_statement(&ks, SINGLE_NODE_REPLICATION)).await;
    run(&session, &migrations::migrations_table(&ks)).await;
    for statement in migrations::MIGRATIONS[0].statements(&ks) {
        run(&session, &statement).await;
    }
    let record = |version: u32| {
        format!(
            "INSERT INTO {ks}.schema_migrations (version, description, applied_at) VALUES ({version}, 'by hand', toTimestamp(now()))"
        )
    };
    run(&session, &record(1)).await;

    let behind = refusal(on_keyspace(&ks, false)).await;
    assert!(behind.contains(&format!("the schema is at version 1, this origin needs {SCHEMA_VERSION}")), "{behind}");
    assert!(behind.contains("run `bloomgate-origin schema apply`"), "{behind}");

    // Applied, then a version past this build's recorded, as a newer release's Job would.
    let applied = CassandraDatabase::apply_schema(&settings(&on_keyspace(&ks, false))).await.unwrap();
    let versions: Vec<u32> = applied.applied.iter().map(|(v, _)| *v).collect();
    assert_eq!(versions, (2..=SCHEMA_VERSION).collect::<Vec<_>>(), "only what was missing: {applied}");

    // A newer release's migration that only added what this build never touches (it says so
    // in `oldest_reader`): this origin runs on it, as a rollback or an old pod restarting
    // mid-upgrade would, and `schema apply` has nothing to do.
    run(
        &session,
        &format!(
            "INSERT INTO {ks}.schema_migrations (version, description, oldest_reader, applied_at) VALUES ({}, 'added', {SCHEMA_VERSION}, toTimestamp(now()))",
            SCHEMA_VERSION + 1
        ),
    )
    .await;
    let origin = TestOrigin::start(on_keyspace(&ks, false)).await;
    let ready = database_readiness(&origin, |db| !db.contains("not connected yet")).await;
    assert_eq!(ready, Ok("ok".to_owned()), "an origin runs on a schema whose newer migrations only added");
    drop(origin);
    let again = CassandraDatabase::apply_schema(&settings(&on_keyspace(&ks, false))).await.unwrap();
    assert!(again.applied.is_empty() && again.version == SCHEMA_VERSION + 1, "{again}");

    // One that older builds would misread (recorded without an oldest reader, as by hand).
    run(&session, &record(SCHEMA_VERSION + 2)).await;
    let newer = format!(
        "the schema is at version {}, newer than this origin knows ({SCHEMA_VERSION}): upgrade this origin",
        SCHEMA_VERSION + 2
    );
    let ahead = refusal(on_keyspace(&ks, false)).await;
    assert!(ahead.contains(&newer), "{ahead}");
    let managing = refusal(on_keyspace(&ks, true)).await;
    assert!(managing.contains(&newer), "an origin that applies the schema refuses it too: {managing}");
    let err = CassandraDatabase::apply_schema(&settings(&on_keyspace(&ks, false))).await.unwrap_err().to_string();
    assert!(err.contains(&newer), "and so does `schema apply`: {err}");
    drop_keyspace(&session, &ks).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyspace_without_versions_or_without_a_replication_is_refused_saying_what_to_do() {
    services().await;
    let (session, ks) = (cql().await, keyspace());

    // Missing, and an origin that applies no schema creates nothing.
    let missing = refusal(on_keyspace(&ks, false)).await;
    assert!(missing.contains(&format!("keyspace {ks} records no schema version")), "{missing}");
    assert!(missing.contains("it does not exist") && missing.contains("schema apply"), "{missing}");
    assert!(!keyspace_exists(&session, &ks).await, "the check created the keyspace");

    // Missing, and no replication to create it with: neither an origin nor `schema apply`
    // creates it, both naming the clause to set.
    let unset = Config { cassandra_replication: String::new(), ..on_keyspace(&ks, true) };
    let why = refusal(unset.clone()).await;
    for words in ["cassandra_replication", "NetworkTopologyStrategy", "'replication_factor': 1"] {
        assert!(why.contains(words), "{words:?} in: {why}");
    }
    let err = CassandraDatabase::apply_schema(&settings(&unset)).await.unwrap_err().to_string();
    assert!(err.contains("NetworkTopologyStrategy"), "{err}");
    assert!(!keyspace_exists(&session, &ks).await, "created without the replication asked for");

    // Made by hand before versions were recorded, without the format column: named.
    run(&session, &migrations::keyspace_statement(&ks, SINGLE_NODE_REPLICATION)).await;
    run(&session, &migrations::keys_table(&ks)).await;
    run(&session, &migrations::filters_table(&ks)).await;
    let by_hand = refusal(on_keyspace(&ks, false)).await;
    assert!(by_hand.contains("column filters.format (int) is missing"), "{by_hand}");
    assert!(by_hand.contains("Run `bloomgate-origin schema apply`"), "{by_hand}");

    // `schema apply` records the versions on it, and the origin is ready.
    let applied = CassandraDatabase::apply_schema(&settings(&on_keyspace(&ks, false))).await.unwrap();
    assert!(!applied.created_keyspace && applied.version == SCHEMA_VERSION, "{applied}");
    let origin = TestOrigin::start(on_keyspace(&ks, false)).await;
    database_readiness(&origin, |db| db == "ok").await.unwrap_or_else(|last| panic!("not ready: {last}"));
    drop(origin);
    drop_keyspace(&session, &ks).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_definition_in_a_newer_format_is_refused_never_guessed() {
    services().await;
    let (session, ks) = (cql().await, keyspace());
    let origin = TestOrigin::start(on_keyspace(&ks, true)).await;
    database_readiness(&origin, |db| db == "ok").await.unwrap_or_else(|last| panic!("not ready: {last}"));
    let (kept, rewritten) = (unique_filter("kept"), unique_filter("rewritten"));
    let keys = random_keys(2);
    for filter in [&kept, &rewritten] {
        origin.create_filter(filter, 10_000, 0.01).await;
        origin.insert_all(filter, &keys[..1]).await;
    }

    // A definition a newer release wrote, never seen by this origin.
    let newer = unique_filter("newer");
    run(
        &session,
        &format!(
            "INSERT INTO {ks}.filters (name, key_format, capacity, fp_rate, segment_bytes, format) VALUES ('{newer}', 'hex:64', 10000, 0.01, 65536, 2)"
        ),
    )
    .await;
    let refused = origin.get(&newer, &keys[0]).await;
    assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE, "refused: neither 404 nor a guess");
    let problem: Value = refused.json().await.unwrap();
    let detail = problem["detail"].as_str().unwrap_or_default();
    assert!(
        detail.contains(&newer) && detail.contains("format 2") && detail.contains("upgrade this origin"),
        "{problem}"
    );
    assert!(problem["hint"].as_str().is_some_and(|h| h.contains("Upgrade this origin")), "{problem}");

    // The other filters still answer.
    assert_eq!(origin.get(&kept, &keys[0]).await.status(), StatusCode::OK);
    assert_eq!(origin.get(&kept, &keys[1]).await.status(), StatusCode::NOT_FOUND);
    assert_eq!(origin.get(&unique_filter("none"), &keys[0]).await.status(), StatusCode::NOT_FOUND);

    // A definition this origin holds, rewritten in a newer format: dropped once its cache
    // time is up, and refused from then on.
    run(&session, &format!("UPDATE {ks}.filters SET format = 2 WHERE name = '{rewritten}'")).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let status = origin.get(&rewritten, &keys[0]).await.status();
        if status == StatusCode::SERVICE_UNAVAILABLE {
            break;
        }
        assert_eq!(status, StatusCode::OK, "while the cached definition is used, the key is found");
        assert!(Instant::now() < deadline, "the rewritten definition was used on");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(origin.get(&rewritten, &keys[1]).await.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(origin.get(&kept, &keys[0]).await.status(), StatusCode::OK);
    drop(origin);
    drop_keyspace(&session, &ks).await;
}
