//! Origins over TLS with credentials, against real stores: a Redis serving only `--tls-port`
//! with an ACL user, a Redis Cluster over TLS, and a Cassandra with client encryption and
//! PasswordAuthenticator. The settings are the "Managed services" block of
//! docs/operations.md, its hosts and files replaced by the local ones, so the documented
//! settings are the tested ones. Then the mistakes an operator makes, each answered with what
//! to check: a CA that did not sign the server's certificate, a wrong password, a plaintext
//! URL against a TLS port.
//!
//! # Running
//! `scripts/services start` and `scripts/services start --tls` (certificates, keystores and
//! passwords are made locally into `.state/tls/`), then
//! `cargo test -p bloomgate-tests --test tls_stores`. `scripts/test` does all of it.

use bloomgate_origin::config::Config;
use bloomgate_tests::origin::{TestOrigin, EDGE_SECRET, TOKEN};
use bloomgate_tests::tls_services::TlsServices;
use bloomgate_tests::{random_keys, unique_filter};
use reqwest::StatusCode;
use serde_json::Value;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The operations guide, whose "Managed services" block these origins run with.
const GUIDE: &str = include_str!("../../docs/operations.md");

/// The TOML block of the guide's "Managed services" section.
fn documented_settings() -> toml::Table {
    let block = GUIDE.split("<!-- managed-services -->").nth(1).expect("the guide marks its managed-services block");
    let toml = block.split("```toml").nth(1).and_then(|b| b.split("```").next()).expect("a ```toml block");
    toml.parse().expect("the documented block is TOML")
}

/// The documented block with every value replaced by the local services' (each documented
/// setting must have its local counterpart here, so the block cannot drift from the test),
/// then read as the origin reads a config file; the test origin's own settings on top.
fn managed_config(tls: &TlsServices, tune: impl FnOnce(&mut toml::Table)) -> Config {
    let path = |name: &str| toml::Value::String(tls.get(name).to_owned());
    let mut table = toml::Table::new();
    for (setting, _) in documented_settings() {
        let local = match setting.as_str() {
            "redis_url" => toml::Value::String(format!("rediss://{}/", tls.get("BG_TLS_REDIS_ADDR"))),
            "redis_user" => path("BG_TLS_REDIS_USER"),
            "redis_password_file" => path("BG_TLS_REDIS_PASSWORD_FILE"),
            "redis_tls_ca_file" | "cassandra_tls_ca_file" => path("BG_TLS_CA_FILE"),
            "redis_tls_client_cert_file" => path("BG_TLS_CLIENT_CERT_FILE"),
            "redis_tls_client_key_file" => path("BG_TLS_CLIENT_KEY_FILE"),
            "cassandra_nodes" => toml::Value::Array(vec![path("BG_TLS_CASSANDRA_ADDR")]),
            "cassandra_user" => path("BG_TLS_CASSANDRA_USER"),
            "cassandra_password_file" => path("BG_TLS_CASSANDRA_PASSWORD_FILE"),
            "cassandra_tls" => toml::Value::Boolean(true),
            other => panic!("docs/operations.md documents {other:?}, which this test does not run with"),
        };
        table.insert(setting, local);
    }
    tune(&mut table);
    let file = std::env::temp_dir().join(format!("bloomgate-tls-{:016x}.toml", rand::random::<u64>()));
    std::fs::write(&file, toml::to_string(&table).unwrap()).unwrap();
    let config = Config::from_file(&file).unwrap_or_else(|e| panic!("the documented settings: {e}"));
    let _ = std::fs::remove_file(file);
    Config {
        listen: "127.0.0.1:0".parse().unwrap(),
        cassandra_keyspace: "bloomgate_tls_test".into(),
        cassandra_replication: bloomgate_tests::origin::SINGLE_NODE_REPLICATION.into(),
        cassandra_consistency: "one".into(),
        delete_skew_margin_ms: 0,
        writer_tokens: vec![TOKEN.into()],
        edge_secret: Some(EDGE_SECRET.into()),
        recovery_interval_ms: 0,
        redis_timeout_ms: 250,
        ..config
    }
}

/// Readiness's body once `done` holds of it (the origin connects in the background), or the
/// last body after `within`.
async fn readiness_until(origin: &TestOrigin, within: Duration, done: impl Fn(&Value) -> bool) -> Result<Value, Value> {
    let deadline = Instant::now() + within;
    loop {
        let r = origin.http.get(format!("{}/readyz", origin.base)).send().await.unwrap();
        let body: Value = r.json().await.unwrap();
        if done(&body) {
            return Ok(body);
        }
        if Instant::now() > deadline {
            return Err(body);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Both stores answer: a write through `writer` is seen at once through `reader`, and a key
/// never written is a "no" from the filter.
async fn write_here_read_there(writer: &TestOrigin, reader: &TestOrigin) {
    for origin in [writer, reader] {
        let ok = |b: &Value| b["filter"] == "ok" && b["database"] == "ok";
        readiness_until(origin, Duration::from_secs(60), ok).await.unwrap_or_else(|b| panic!("not both stores: {b}"));
    }
    let filter = unique_filter("tls");
    writer.create_filter(&filter, 10_000, 0.01).await;
    for key in random_keys(20) {
        assert_eq!(writer.put(&filter, &key).await.status(), StatusCode::CREATED, "a write over TLS");
        let seen = reader.get(&filter, &key).await;
        assert_eq!(seen.status(), StatusCode::OK, "a write through one origin, read at once through another");
    }
    let absent = reader.get(&filter, &random_keys(1)[0]).await;
    assert!(matches!(absent.status(), StatusCode::NOT_FOUND | StatusCode::OK));
    let mut by_filter = 0;
    for key in random_keys(40) {
        let r = reader.get(&filter, &key).await;
        by_filter +=
            usize::from(r.status() == StatusCode::NOT_FOUND && r.headers()["x-bloomgate-answered-by"] == "filter");
    }
    assert!(by_filter >= 36, "only {by_filter} of 40 absent keys were a 'no' from the filter over TLS");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_origins_over_tls_with_credentials_keep_the_promise() {
    let tls = TlsServices::require().await;
    let a = TestOrigin::start(managed_config(&tls, |_| {})).await;
    let b = TestOrigin::start(managed_config(&tls, |_| {})).await;
    write_here_read_there(&a, &b).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_origin_on_a_tls_redis_cluster() {
    let tls = TlsServices::require().await;
    let cluster = |t: &mut toml::Table| {
        t.remove("redis_url");
        let nodes = tls.cluster_urls().into_iter().map(toml::Value::String).collect();
        t.insert("redis_cluster_nodes".into(), toml::Value::Array(nodes));
        // Three masters and no replicas: no add can wait for one.
        t.insert("redis_min_replicas_acked".into(), toml::Value::Integer(0));
    };
    let a = TestOrigin::start(managed_config(&tls, cluster)).await;
    let b = TestOrigin::start(managed_config(&tls, cluster)).await;
    write_here_read_there(&a, &b).await;
}

/// An origin with one mistake in its settings: it starts, is not served by the store it cannot
/// reach, and says why in readiness (`store` is `filter` or `database`).
async fn refusal(tls: &TlsServices, store: &str, mistake: impl FnOnce(&mut toml::Table)) -> String {
    let origin = TestOrigin::start(managed_config(tls, mistake)).await;
    // Until a first attempt has failed, readiness says only "not connected yet".
    let failed = |b: &Value| b[store].as_str().is_some_and(|why| why != "ok" && !why.contains("not connected yet"));
    let body = readiness_until(&origin, Duration::from_secs(30), failed).await;
    let body = body.unwrap_or_else(|b| panic!("{store} answered despite the mistake, or never failed: {b}"));
    let why = body[store].as_str().unwrap().to_owned();
    println!("{store}: {why}");
    why
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_ca_a_wrong_password_and_plaintext_are_refused_with_what_to_check() {
    let tls = TlsServices::require().await;
    let text = |value: PathBuf| toml::Value::String(value.display().to_string());
    let wrong_ca = tls.path("BG_TLS_WRONG_CA_FILE");
    let (ca, ca2) = (wrong_ca.clone(), wrong_ca);
    let why = refusal(&tls, "filter", |t| drop(t.insert("redis_tls_ca_file".into(), text(ca)))).await;
    assert!(why.contains("certificate") && why.contains("redis_tls_ca_file"), "Redis, wrong CA: {why}");
    let why = refusal(&tls, "database", |t| drop(t.insert("cassandra_tls_ca_file".into(), text(ca2)))).await;
    assert!(why.contains("cassandra_tls_ca_file"), "Cassandra, wrong CA: {why}");

    let wrong_password = std::env::temp_dir().join(format!("bloomgate-wrong-{:016x}", rand::random::<u64>()));
    std::fs::write(&wrong_password, "not-the-password\n").unwrap();
    let (p1, p2) = (wrong_password.clone(), wrong_password.clone());
    let why = refusal(&tls, "filter", |t| drop(t.insert("redis_password_file".into(), text(p1)))).await;
    assert!(why.contains("authentication failed") && why.contains("redis_password"), "Redis, wrong password: {why}");
    let why = refusal(&tls, "database", |t| drop(t.insert("cassandra_password_file".into(), text(p2)))).await;
    assert!(why.contains("incorrect") && why.contains("cassandra_password"), "Cassandra, wrong password: {why}");
    let _ = std::fs::remove_file(wrong_password);

    let plaintext = format!("redis://{}/", tls.get("BG_TLS_REDIS_ADDR"));
    let why = refusal(&tls, "filter", |t| {
        for file in ["redis_tls_ca_file", "redis_tls_client_cert_file", "redis_tls_client_key_file"] {
            t.remove(file);
        }
        t.insert("redis_url".into(), toml::Value::String(plaintext));
    })
    .await;
    assert!(why.contains("rediss://"), "Redis, plaintext to a TLS port: {why}");
    let why = refusal(&tls, "database", |t| {
        t.remove("cassandra_tls_ca_file");
        t.insert("cassandra_tls".into(), toml::Value::Boolean(false));
    })
    .await;
    assert!(why.contains("cassandra_tls = true"), "Cassandra, plaintext to a TLS port: {why}");
}
