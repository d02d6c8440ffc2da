//! An origin served in-process on a free port, with a client that speaks its API.

use bloomgate_origin::config::Config;
use bloomgate_origin::rebuild::{self, RebuildError, RebuildReport};
use reqwest::Response;
use serde_json::Value;
use tokio::sync::oneshot;

/// Writer token every test origin accepts.
pub const TOKEN: &str = "test-writer-token-0123456789";
/// Edge secret every test origin accepts.
pub const EDGE_SECRET: &str = "test-edge-secret";
/// The replication test keyspaces are created with: one replica, on the single test node.
/// Said explicitly: the origin creates no keyspace without it.
pub const SINGLE_NODE_REPLICATION: &str = "{'class': 'SimpleStrategy', 'replication_factor': 1}";

/// A running origin; dropped = shut down.
pub struct TestOrigin {
    /// `http://127.0.0.1:port`.
    pub base: String,
    /// HTTP client.
    pub http: reqwest::Client,
    /// The origin's state (its gate and stores), for driving rebuilds directly.
    pub state: bloomgate_origin::routes::AppState,
    /// The API client, with the writer token.
    pub client: bloomgate_client::Client,
    shutdown: Option<oneshot::Sender<()>>,
    /// The quick start's key file directory, removed on drop.
    data_dir: Option<std::path::PathBuf>,
}

/// Config for an origin over the given Redis URL and Cassandra address.
pub fn config(redis_url: Option<String>, cassandra: &str) -> Config {
    Config {
        listen: "127.0.0.1:0".parse().unwrap(),
        redis_url,
        // Generous for a shared 2-core machine running everything at once; tests of the
        // timeout itself set their own.
        redis_timeout_ms: 250,
        cassandra_nodes: vec![cassandra.to_owned()],
        cassandra_keyspace: "bloomgate_test".into(),
        cassandra_replication: SINGLE_NODE_REPLICATION.into(),
        cassandra_consistency: "one".into(),
        cassandra_timeout_ms: 1000,
        // Every test origin reads one clock: no skew to allow for, and a delete right after a
        // write (as tests do) removes it.
        delete_skew_margin_ms: 0,
        writer_tokens: vec![TOKEN.into()],
        edge_secret: Some(EDGE_SECRET.into()),
        meta_cache_ms: 200,
        // Tests share one Cassandra keyspace: an automatic rebuild in one test's origin would
        // act on other tests' filters. Tests of recovery turn it on with their own keyspace.
        recovery_interval_ms: 0,
        ..Config::default()
    }
}

impl TestOrigin {
    /// An origin on the test services (Redis and Cassandra, which must be reachable), with
    /// `tune` applied to its config.
    pub async fn on_services(tune: impl FnOnce(&mut Config)) -> TestOrigin {
        crate::require("Redis", &crate::redis_addr()).await;
        crate::require("Cassandra", &crate::cassandra_addr()).await;
        let mut cfg = config(Some(format!("redis://{}/", crate::redis_addr())), &crate::cassandra_addr());
        tune(&mut cfg);
        TestOrigin::start(cfg).await
    }

    /// An origin on the test Redis Cluster (which must be reachable) and the test Cassandra,
    /// with `tune` applied to its config.
    pub async fn on_cluster(tune: impl FnOnce(&mut Config)) -> TestOrigin {
        let seeds = crate::redis_cluster::require().await;
        crate::require("Cassandra", &crate::cassandra_addr()).await;
        let mut cfg = config(None, &crate::cassandra_addr());
        cfg.redis_cluster_nodes = seeds.iter().map(|n| format!("redis://{n}")).collect();
        tune(&mut cfg);
        TestOrigin::start(cfg).await
    }

    /// An origin on the embedded stores, as the quick start runs it (the filter in process, the
    /// keys in a file in a directory of its own, removed when it is dropped): no services
    /// needed. `tune` is applied to its config.
    pub async fn quick_start(tune: impl FnOnce(&mut Config)) -> TestOrigin {
        let dir = std::env::temp_dir().join(format!("bloomgate-quick-{:016x}", rand::random::<u64>()));
        let mut cfg = config(None, "unused:0");
        cfg.cassandra_nodes.clear();
        cfg.data_dir = dir.clone();
        tune(&mut cfg);
        let mut origin = TestOrigin::start(cfg).await;
        origin.data_dir = Some(dir);
        origin
    }

    /// Builds the state (connecting the stores) and serves.
    pub async fn start(config: Config) -> TestOrigin {
        let listener = tokio::net::TcpListener::bind(config.listen).await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let state = bloomgate_origin::build_state(config).await.expect("origin state");
        let (tx, rx) = oneshot::channel();
        tokio::spawn(bloomgate_origin::run(listener, state.clone(), async {
            let _ = rx.await;
        }));
        // Idle connections are dropped here (by both clients) before the origin closes them (its
        // header-read timeout, 30 s by default, also ends idle keep-alive connections): reusing
        // one just as the server closes it would fail a request for no reason of the test's.
        let http = reqwest::Client::builder()
            .pool_max_idle_per_host(64)
            .pool_idle_timeout(std::time::Duration::from_secs(4))
            .build()
            .unwrap();
        let client = bloomgate_client::Client::builder(&base)
            .token(TOKEN)
            .pool_idle_timeout(std::time::Duration::from_secs(4))
            .build()
            .expect("a client of the test origin");
        TestOrigin { base, http, state, client, shutdown: Some(tx), data_dir: None }
    }

    /// Creates a filter (hex:64 keys); its stats as JSON.
    pub async fn create_filter(&self, name: &str, capacity: u64, fp_rate: f64) -> Value {
        let create = bloomgate_client::api::CreateFilter::new(capacity, fp_rate);
        let stats = self.client.create_filter(name, &create).await.unwrap_or_else(|e| panic!("create filter: {e}"));
        serde_json::to_value(stats).unwrap()
    }

    /// PUT one key; returns the response.
    pub async fn put(&self, filter: &str, key: &str) -> Response {
        self.http.put(format!("{}/v1/filters/{filter}/keys/{key}", self.base)).bearer_auth(TOKEN).send().await.unwrap()
    }

    /// Batch insert; panics unless acknowledged.
    pub async fn insert_all(&self, filter: &str, keys: &[String]) {
        for chunk in keys.chunks(500) {
            let stored = self.client.insert_batch(filter, chunk).await.unwrap_or_else(|e| panic!("insert batch: {e}"));
            assert_eq!(stored.stored, chunk.len());
        }
    }

    /// DELETE one key.
    pub async fn delete(&self, filter: &str, key: &str) -> Response {
        self.http
            .delete(format!("{}/v1/filters/{filter}/keys/{key}", self.base))
            .bearer_auth(TOKEN)
            .send()
            .await
            .unwrap()
    }

    /// The filter's stats, as JSON.
    pub async fn stats(&self, filter: &str) -> Value {
        let stats = self.client.stats(filter).await.unwrap_or_else(|e| panic!("stats: {e}"));
        serde_json::to_value(stats).unwrap()
    }

    /// GET an edge route (`/v1/filters/...`) with the edge secret.
    pub async fn edge_get(&self, path: &str) -> Response {
        self.http
            .get(format!("{}{path}", self.base))
            .header("x-bloomgate-edge-secret", EDGE_SECRET)
            .send()
            .await
            .unwrap()
    }

    /// GET one key.
    pub async fn get(&self, filter: &str, key: &str) -> Response {
        self.http.get(format!("{}/v1/filters/{filter}/keys/{key}", self.base)).send().await.unwrap()
    }

    /// Batch lookup: (seen, answered_by) per key.
    pub async fn lookup_all(&self, filter: &str, keys: &[String]) -> Vec<(bool, String)> {
        let mut out = Vec::with_capacity(keys.len());
        for chunk in keys.chunks(1000) {
            let lookups = self.client.lookup_batch(filter, chunk).await.unwrap_or_else(|e| panic!("lookup batch: {e}"));
            for answer in lookups.results {
                out.push((answer.seen, answer.answered_by.as_str().to_owned()));
            }
        }
        out
    }

    /// Rebuilds `filter` with the origin's own options, as its rebuild endpoint would (no
    /// automatic resize). A future of its own, so a test can await it or spawn it and act
    /// meanwhile.
    pub fn rebuild_now(
        &self,
        filter: &str,
    ) -> impl std::future::Future<Output = Result<RebuildReport, RebuildError>> + Send + 'static {
        let (gate, filter) = (self.state.gate.clone(), filter.to_owned());
        let options = rebuild::RebuildOptions::from_config(&self.state.config, false);
        async move { rebuild::rebuild(gate.filter_store().clone(), gate.database().clone(), &filter, options).await }
    }

    /// Waits until the origin's readiness says it read cluster version `version` (it reads it
    /// every 5 s); panics after `within`.
    pub async fn until_cluster_version(&self, version: u32, within: std::time::Duration) {
        let deadline = std::time::Instant::now() + within;
        loop {
            let r = self.http.get(format!("{}/readyz", self.base)).send().await.unwrap();
            let body: Value = r.json().await.unwrap();
            if body["cluster"]["version"] == version {
                return;
            }
            assert!(std::time::Instant::now() < deadline, "the origin never read cluster version {version}: {body}");
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
    }

    /// The value of a Prometheus sample line (exact name with labels), 0 if absent.
    pub async fn metric(&self, sample: &str) -> f64 {
        let text = self.http.get(format!("{}/metrics", self.base)).send().await.unwrap().text().await.unwrap();
        text.lines()
            .find_map(|l| l.strip_prefix(sample).and_then(|rest| rest.strip_prefix(' ')).map(|v| v.parse().unwrap()))
            .unwrap_or(0.0)
    }
}

impl Drop for TestOrigin {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(dir) = self.data_dir.take() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}
