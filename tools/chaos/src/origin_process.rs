//! One origin process of a chaos run: its configuration (a TOML file, the tuning a run gives
//! every origin), and the process itself, restartable on the same port, `kill -9`able, stopped
//! gracefully at the end.

use anyhow::Context as _;
use bloomgate_client::api::ReadConsistency;
use bloomgate_tests::fault_proxy::ChaosProxy;
use bloomgate_tests::origin::{EDGE_SECRET, TOKEN};
use bloomgate_tests::procs;
use std::io::Write as _;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How the origins are configured (written to each origin's TOML file).
#[derive(Clone, Debug)]
pub struct OriginTuning {
    /// Lookup-path Redis timeout, ms. Slow-Redis faults delay beyond it.
    pub redis_timeout_ms: u64,
    /// Write-path Redis timeout, ms.
    pub redis_write_timeout_ms: u64,
    /// Cassandra per-request timeout, ms.
    pub cassandra_timeout_ms: u64,
    /// Whole-request timeout, ms: above the default `write_recovery_wait_ms` (3 s), so a write
    /// that waits for a rebuild's generation is answered 503 + Retry-After, not timed out.
    pub request_timeout_ms: u64,
    /// Settle wait of rebuilds, ms: not needed for correctness (writes re-read the state after
    /// the database), long enough to catch a builder in its `settling` phase.
    pub rebuild_settle_ms: u64,
    /// How long a replaced generation is kept, ms: above S and the metadata cache.
    pub rebuild_grace_ms: u64,
    /// Automatic rebuild checks, ms.
    pub recovery_interval_ms: u64,
    /// Lease of a rebuild, ms: a killed builder's rebuild is taken over this long after.
    pub rebuild_lease_ms: u64,
    /// Deleted share of keys that triggers a rebuild.
    pub auto_stale_delete_share: f64,
    /// At most one rebuild for drift per this many ms: short, so a burst of deletes is
    /// rebuilt within the recovery wait even right after another rebuild.
    pub auto_rebuild_min_interval_ms: u64,
    /// Insert-journal entries kept per generation: small, so an edge cut off for a while falls
    /// behind the journal and must reload (see `schedule::journal_max_entries`).
    pub journal_max_entries: u64,
    /// How the origins' local copies answer "no" for the run's filter: `lease` (the default) or
    /// `barrier`.
    pub read_consistency: ReadConsistency,
    /// Checkpoint rounds, ms: short, so the Redis losses of the schedule find a recent
    /// checkpoint to recover from (and writes after it to replay).
    pub checkpoint_interval_ms: u64,
    /// Bits a rebuild holds at once: small, so the large rebuilds of the schedule are built in
    /// runs that the other origins help build (and are killed while helping).
    pub rebuild_memory_bytes: u64,
}

impl Default for OriginTuning {
    fn default() -> Self {
        OriginTuning {
            // Generous for a 2-core machine running everything; slow Redis goes above it.
            redis_timeout_ms: 250,
            redis_write_timeout_ms: 1000,
            cassandra_timeout_ms: 1500,
            request_timeout_ms: 4000,
            rebuild_settle_ms: 4000,
            rebuild_grace_ms: 5000,
            recovery_interval_ms: 500,
            rebuild_lease_ms: 5000,
            auto_stale_delete_share: 0.02,
            auto_rebuild_min_interval_ms: 2000,
            journal_max_entries: 200_000,
            read_consistency: ReadConsistency::Lease,
            checkpoint_interval_ms: 2000,
            rebuild_memory_bytes: 2 << 20,
        }
    }
}

/// Where an origin finds Redis.
#[derive(Clone, Copy, Debug)]
pub enum OriginRedis<'a> {
    /// One Redis (the run's private one, through the origin's proxy) at `host:port`.
    Single(&'a str),
    /// A Redis Cluster, through any of these `host:port`s.
    Cluster(&'a [String]),
}

impl OriginRedis<'_> {
    fn toml(self) -> String {
        match self {
            OriginRedis::Single(addr) => format!("redis_url = \"redis://{addr}/\""),
            OriginRedis::Cluster(nodes) => {
                let urls: Vec<String> = nodes.iter().map(|n| format!("\"redis://{n}\"")).collect();
                format!("redis_cluster_nodes = [{}]", urls.join(", "))
            }
        }
    }
}

/// The TOML an origin reads. The metadata cache stays at its default (1 s): it is part of
/// what is tested. The run's keyspace is created by the first origin, with one replica: the
/// shared Cassandra of the tests is a single node.
pub fn origin_toml(port: u16, redis: OriginRedis<'_>, cassandra: &str, keyspace: &str, t: &OriginTuning) -> String {
    let redis = redis.toml();
    format!(
        r#"listen = "127.0.0.1:{port}"
{redis}
redis_timeout_ms = {}
redis_write_timeout_ms = {}
cassandra_nodes = ["{cassandra}"]
cassandra_keyspace = "{keyspace}"
cassandra_replication = "{{'class': 'SimpleStrategy', 'replication_factor': 1}}"
cassandra_consistency = "local_quorum"
cassandra_timeout_ms = {}
request_timeout_ms = {}
writer_tokens = ["{TOKEN}"]
edge_secret = "{EDGE_SECRET}"
recovery_interval_ms = {}
rebuild_settle_ms = {}
rebuild_grace_ms = {}
rebuild_lease_ms = {}
auto_stale_delete_share = {}
auto_rebuild_min_interval_ms = {}
journal_max_entries = {}
read_consistency = "{}"
checkpoint_interval_ms = {}
rebuild_memory_bytes = {}
"#,
        t.redis_timeout_ms,
        t.redis_write_timeout_ms,
        t.cassandra_timeout_ms,
        t.request_timeout_ms,
        t.recovery_interval_ms,
        t.rebuild_settle_ms,
        t.rebuild_grace_ms,
        t.rebuild_lease_ms,
        t.auto_stale_delete_share,
        t.auto_rebuild_min_interval_ms,
        t.journal_max_entries,
        t.read_consistency.as_str(),
        t.checkpoint_interval_ms,
        t.rebuild_memory_bytes,
    )
}

/// One origin process, restartable on the same port with the same config.
pub struct Origin {
    /// Its number.
    pub index: u8,
    /// `http://127.0.0.1:port`.
    pub base: String,
    /// Its stderr (all its lives, appended).
    pub log: PathBuf,
    /// Its own proxy to the private Redis (none on a cluster).
    pub redis_proxy: Option<ChaosProxy>,
    /// A known bug to plant (`BG_PLANTED_BUG`; a `planted-bugs` build only).
    pub planted_bug: Option<String>,
    config: PathBuf,
    exe: PathBuf,
    child: Mutex<Option<Child>>,
    pid: AtomicU32,
    lives: AtomicU32,
}

impl Origin {
    /// Origin `index` on `port`, run as `exe origin --config <config>` and logging to `log`; not
    /// started yet.
    pub fn new(
        index: u8,
        port: u16,
        exe: PathBuf,
        config: PathBuf,
        log: PathBuf,
        redis_proxy: Option<ChaosProxy>,
    ) -> Origin {
        Origin {
            index,
            base: format!("http://127.0.0.1:{port}"),
            log,
            redis_proxy,
            planted_bug: None,
            config,
            exe,
            child: Mutex::new(None),
            pid: AtomicU32::new(0),
            lives: AtomicU32::new(0),
        }
    }

    /// The running process, if any.
    pub fn pid(&self) -> Option<u32> {
        Some(self.pid.load(Ordering::SeqCst)).filter(|p| *p != 0)
    }

    /// Starts the process and waits until `/readyz` answers.
    pub async fn start(&self, http: &reqwest::Client) -> anyhow::Result<()> {
        let life = self.lives.fetch_add(1, Ordering::SeqCst) + 1;
        let mut log = std::fs::OpenOptions::new().create(true).append(true).open(&self.log)?;
        writeln!(log, "=== bloomgate-chaos: origin-{} start #{life} ===", self.index)?;
        let mut command = Command::new(&self.exe);
        if let Some(bug) = &self.planted_bug {
            command.env(bloomgate_origin::planted::VAR, bug);
        }
        let child = command
            .arg("origin")
            .arg("--config")
            .arg(&self.config)
            .env("RUST_LOG", std::env::var("BG_CHAOS_ORIGIN_LOG").unwrap_or_else(|_| "info".into()))
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("start {} origin", self.exe.display()))?;
        self.pid.store(child.id(), Ordering::SeqCst);
        *self.child.lock().unwrap_or_else(|e| e.into_inner()) = Some(child);
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(r) = http.get(format!("{}/readyz", self.base)).send().await {
                if r.status().is_success() {
                    return Ok(());
                }
            }
            let exited =
                self.child.lock().unwrap_or_else(|e| e.into_inner()).as_mut().and_then(|c| c.try_wait().ok().flatten());
            if let Some(status) = exited {
                anyhow::bail!("origin-{} exited ({status}) while starting: see {}", self.index, self.log.display());
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "origin-{} did not answer /readyz within 60 s: see {}",
                self.index,
                self.log.display()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// `kill -9`: no goodbye, no graceful shutdown.
    pub fn kill9(&self) {
        if let Some(mut child) = self.child.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.pid.store(0, Ordering::SeqCst);
    }

    /// SIGTERM, then SIGKILL after 5 s.
    pub fn stop(&self) {
        if let Some(mut child) = self.child.lock().unwrap_or_else(|e| e.into_inner()).take() {
            procs::stop(&mut child, "TERM", Duration::from_secs(5));
        }
        self.pid.store(0, Ordering::SeqCst);
    }
}

impl Drop for Origin {
    fn drop(&mut self) {
        self.kill9();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_origin_config_parses_and_keeps_the_metadata_cache_default() {
        let toml = origin_toml(
            8123,
            OriginRedis::Single("127.0.0.1:7000"),
            "127.0.0.1:9042",
            "chaos_x",
            &OriginTuning::default(),
        );
        let path = std::env::temp_dir().join(format!("bloomgate-chaos-config-{}.toml", rand::random::<u64>()));
        std::fs::write(&path, toml).unwrap();
        let config = bloomgate_origin::config::Config::from_file(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        config.validate().unwrap();
        assert_eq!(config.listen.port(), 8123);
        assert_eq!(config.meta_cache_ms, bloomgate_origin::config::Config::default().meta_cache_ms);
        assert_eq!(config.cassandra_consistency, "local_quorum");
        assert_eq!(config.cassandra_replication, "{'class': 'SimpleStrategy', 'replication_factor': 1}");
        assert!(config.rebuild_settle_ms >= config.request_timeout_ms, "the rebuild's argument needs it");
        assert!(config.rebuild_grace_ms > 3000 + config.meta_cache_ms);
        let nodes = ["127.0.0.1:7001".to_owned(), "127.0.0.1:7002".to_owned()];
        let toml =
            origin_toml(8123, OriginRedis::Cluster(&nodes), "127.0.0.1:9042", "chaos_x", &OriginTuning::default());
        std::fs::write(&path, toml).unwrap();
        let config = bloomgate_origin::config::Config::from_file(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(config.redis_cluster_nodes, ["redis://127.0.0.1:7001", "redis://127.0.0.1:7002"]);
    }
}
