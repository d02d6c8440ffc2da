//! The processes of a chaos run: a private `redis-server` (one proxy in front of it per
//! origin, for slow-Redis faults), N origins as separate OS processes (this binary re-executed
//! as `bloomgate-chaos origin --config <file>`, so they can be `kill -9`ed), and `wrangler dev`
//! pointed at origin 0 through a proxy that can cut it. Cassandra is the shared one, paused
//! with SIGSTOP at most, and always continued (see [`CassandraPause`]).

use super::schedule::RedisKind;
use anyhow::Context as _;
use bloomgate_tests::edge::Wrangler;
use bloomgate_tests::fault_proxy::ChaosProxy;
use bloomgate_tests::origin::{EDGE_SECRET, TOKEN};
use bloomgate_tests::redis_server::RedisServer;
use std::io::Write as _;
use std::path::{Path, PathBuf};
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
    /// Whole-request timeout, ms.
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
}

impl Default for OriginTuning {
    fn default() -> Self {
        OriginTuning {
            // Generous for a 2-core machine running everything; slow Redis goes above it.
            redis_timeout_ms: 250,
            redis_write_timeout_ms: 1000,
            cassandra_timeout_ms: 1500,
            request_timeout_ms: 3000,
            rebuild_settle_ms: 4000,
            rebuild_grace_ms: 5000,
            recovery_interval_ms: 500,
            rebuild_lease_ms: 5000,
            auto_stale_delete_share: 0.02,
        }
    }
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
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
/// what is tested.
pub fn origin_toml(port: u16, redis: OriginRedis<'_>, cassandra: &str, keyspace: &str, t: &OriginTuning) -> String {
    let redis = redis.toml();
    format!(
        r#"listen = "127.0.0.1:{port}"
{redis}
redis_timeout_ms = {}
redis_write_timeout_ms = {}
cassandra_nodes = ["{cassandra}"]
cassandra_keyspace = "{keyspace}"
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
    )
}

/// Empties a shared Redis Cluster, as a private Redis starts empty: a run's filter is
/// created, never found left over from the run before.
async fn flush_cluster(nodes: &[String]) -> anyhow::Result<()> {
    let client = redis::cluster::ClusterClient::new(nodes.iter().map(|n| format!("redis://{n}")).collect::<Vec<_>>())?;
    let mut conn = tokio::time::timeout(Duration::from_secs(10), client.get_async_connection())
        .await
        .context("connect to the Redis Cluster")??;
    let flushed: redis::RedisResult<()> = redis::cmd("FLUSHALL").query_async(&mut conn).await;
    flushed.with_context(|| format!("FLUSHALL on the Redis Cluster at {}", nodes.join(",")))
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
    config: PathBuf,
    exe: PathBuf,
    child: Mutex<Option<Child>>,
    pid: AtomicU32,
    lives: AtomicU32,
}

impl Origin {
    /// The running process, if any.
    pub fn pid(&self) -> Option<u32> {
        Some(self.pid.load(Ordering::SeqCst)).filter(|p| *p != 0)
    }

    /// Starts the process and waits until `/readyz` answers.
    pub async fn start(&self, http: &reqwest::Client) -> anyhow::Result<()> {
        let life = self.lives.fetch_add(1, Ordering::SeqCst) + 1;
        let mut log = std::fs::OpenOptions::new().create(true).append(true).open(&self.log)?;
        writeln!(log, "=== bloomgate-chaos: origin-{} start #{life} ===", self.index)?;
        let child = Command::new(&self.exe)
            .arg("origin")
            .arg("--config")
            .arg(&self.config)
            .env("RUST_LOG", std::env::var("BLOOMGATE_CHAOS_ORIGIN_LOG").unwrap_or_else(|_| "info".into()))
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
            signal(child.id(), "TERM");
            let deadline = Instant::now() + Duration::from_secs(5);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        self.pid.store(0, Ordering::SeqCst);
    }
}

impl Drop for Origin {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// Sends a signal with `kill` (the crate forbids `unsafe`, so no libc).
fn signal(pid: u32, name: &str) -> bool {
    Command::new("kill").arg(format!("-{name}")).arg(pid.to_string()).status().is_ok_and(|s| s.success())
}

/// The Cassandra process a [`CassandraPause`] stopped, 0 if none: continued by
/// [`resume_cassandra`] from a panic hook or a signal handler too.
static PAUSED_CASSANDRA: AtomicU32 = AtomicU32::new(0);

/// Continues Cassandra if this process stopped it. Safe to call any number of times.
pub fn resume_cassandra() {
    let pid = PAUSED_CASSANDRA.swap(0, Ordering::SeqCst);
    if pid != 0 {
        signal(pid, "CONT");
    }
}

/// Cassandra stopped with SIGSTOP; continued (SIGCONT) when dropped, also while unwinding.
pub struct CassandraPause(());

impl CassandraPause {
    /// Stops the process.
    pub fn stop(pid: u32) -> anyhow::Result<CassandraPause> {
        PAUSED_CASSANDRA.store(pid, Ordering::SeqCst);
        anyhow::ensure!(signal(pid, "STOP"), "kill -STOP {pid} failed");
        Ok(CassandraPause(()))
    }
}

impl Drop for CassandraPause {
    fn drop(&mut self) {
        resume_cassandra();
    }
}

/// Finds Cassandra's pid: `BLOOMGATE_CASSANDRA_PID_FILE`, else the pid file that
/// `scripts/services` writes in this checkout, else in the main checkout of a git worktree.
pub fn cassandra_pid(explicit: Option<&Path>) -> Option<(u32, PathBuf)> {
    let root = bloomgate_tests::repo_root();
    let mut candidates: Vec<PathBuf> = explicit.map(Path::to_path_buf).into_iter().collect();
    candidates.extend(std::env::var_os("BLOOMGATE_CASSANDRA_PID_FILE").map(PathBuf::from));
    candidates.push(root.join(".state/run/cassandra.pid"));
    let common = Command::new("git").current_dir(&root).args(["rev-parse", "--git-common-dir"]).output().ok();
    if let Some(out) = common.filter(|o| o.status.success()) {
        let dir = root.join(String::from_utf8_lossy(&out.stdout).trim());
        if let Some(main) = dir.parent() {
            candidates.push(main.join(".state/run/cassandra.pid"));
        }
    }
    candidates.into_iter().find_map(|path| {
        let pid: u32 = std::fs::read_to_string(&path).ok()?.trim().parse().ok()?;
        Path::new(&format!("/proc/{pid}")).exists().then_some((pid, path))
    })
}

/// The edge and the proxy between it and origin 0.
pub struct Edge {
    /// `wrangler dev`.
    pub wrangler: Wrangler,
    /// Cut to cut the edge off its origin.
    pub proxy: ChaosProxy,
}

/// What to start.
#[derive(Clone, Debug)]
pub struct ClusterSettings {
    /// Origins (at least 2).
    pub origins: usize,
    /// This executable, re-executed as `origin`.
    pub exe: PathBuf,
    /// Cassandra `host:port`.
    pub cassandra: String,
    /// The run's keyspace.
    pub keyspace: String,
    /// Configs, logs and Redis data.
    pub dir: PathBuf,
    /// Start `wrangler dev`.
    pub edge: bool,
    /// The edge's FRESHNESS_SECS.
    pub freshness_secs: u32,
    /// Origin settings.
    pub tuning: OriginTuning,
    /// A Redis Cluster's nodes (`host:port`) to use instead of a private Redis.
    pub redis_cluster: Vec<String>,
}

impl ClusterSettings {
    /// Which Redis the run uses.
    pub fn redis_kind(&self) -> RedisKind {
        RedisKind::of(&self.redis_cluster)
    }
}

/// Everything started for one run.
pub struct Cluster {
    /// The private Redis (blocking calls: kill, restart); none on a Redis Cluster.
    pub redis: Option<Mutex<RedisServer>>,
    /// The origins.
    pub origins: Vec<Origin>,
    /// The edge, if started.
    pub edge: Option<Edge>,
    /// What it was started with.
    pub settings: ClusterSettings,
}

impl Cluster {
    /// Starts Redis, the origins one after another (the first creates the keyspace), and the
    /// edge.
    pub async fn start(settings: ClusterSettings, http: &reqwest::Client) -> anyhow::Result<Cluster> {
        anyhow::ensure!(settings.origins >= 2, "a chaos run needs at least 2 origins");
        std::fs::create_dir_all(&settings.dir)?;
        let redis = match settings.redis_kind() {
            RedisKind::Private => Some(tokio::task::spawn_blocking(RedisServer::start).await?),
            RedisKind::Cluster => {
                flush_cluster(&settings.redis_cluster).await?;
                None
            }
        };
        let mut origins = Vec::new();
        for index in 0..settings.origins {
            let port = free_port()?;
            let redis_proxy = match &redis {
                Some(redis) => Some(ChaosProxy::start(&redis.addr()).await),
                None => None,
            };
            let config = settings.dir.join(format!("origin-{index}.toml"));
            let origin_redis = match &redis_proxy {
                Some(proxy) => OriginRedis::Single(&proxy.addr),
                None => OriginRedis::Cluster(&settings.redis_cluster),
            };
            let toml = origin_toml(port, origin_redis, &settings.cassandra, &settings.keyspace, &settings.tuning);
            std::fs::write(&config, toml)?;
            let origin = Origin {
                index: index as u8,
                base: format!("http://127.0.0.1:{port}"),
                log: settings.dir.join(format!("origin-{index}.log")),
                redis_proxy,
                config,
                exe: settings.exe.clone(),
                child: Mutex::new(None),
                pid: AtomicU32::new(0),
                lives: AtomicU32::new(0),
            };
            origin.start(http).await?;
            origins.push(origin);
        }
        let edge = if settings.edge {
            let proxy = ChaosProxy::start(origins[0].base.trim_start_matches("http://")).await;
            let wrangler =
                Wrangler::start(&format!("http://{}", proxy.addr), EDGE_SECRET, settings.freshness_secs).await;
            Some(Edge { wrangler, proxy })
        } else {
            None
        };
        Ok(Cluster { redis: redis.map(Mutex::new), origins, edge, settings })
    }

    /// The private Redis's address (not through a proxy); on a cluster, its first node's.
    pub fn redis_url(&self) -> String {
        match &self.redis {
            Some(redis) => redis.lock().unwrap_or_else(|e| e.into_inner()).url(),
            None => format!("redis://{}/", self.settings.redis_cluster[0]),
        }
    }

    /// Runs a blocking operation on the private Redis server (kill, restart) off the async
    /// threads. Fails on a cluster.
    pub fn with_redis<T>(&self, f: impl FnOnce(&mut RedisServer) -> T) -> anyhow::Result<T> {
        let redis = self.redis.as_ref().context("this fault needs the run's private Redis, not a cluster")?;
        Ok(tokio::task::block_in_place(|| f(&mut redis.lock().unwrap_or_else(|e| e.into_inner()))))
    }

    /// Every origin's Redis proxy (none on a cluster).
    pub fn redis_proxies(&self) -> impl Iterator<Item = &ChaosProxy> {
        self.origins.iter().filter_map(|o| o.redis_proxy.as_ref())
    }

    /// Stops every process (origins gracefully, then the edge and Redis by dropping).
    pub fn stop_origins(&self) {
        for origin in &self.origins {
            origin.stop();
        }
    }

    /// Every log a panic may show up in: (name, path).
    pub fn logs(&self) -> Vec<(String, PathBuf)> {
        let mut logs: Vec<(String, PathBuf)> =
            self.origins.iter().map(|o| (format!("origin-{}", o.index), o.log.clone())).collect();
        if let Some(edge) = &self.edge {
            logs.push(("wrangler".into(), edge.wrangler.log.clone()));
        }
        logs
    }
}

/// Lines of a log that show a panic: Rust's panic message (native, or wasm through the
/// panic hook) and the trap a wasm panic ends in.
pub fn panic_lines(text: &str) -> Vec<String> {
    text.lines()
        .filter(|l| l.contains("panicked at") || l.contains("RuntimeError: unreachable"))
        .map(|l| l.chars().take(500).collect())
        .collect()
}

/// The lines at the end of the edge's log that say how it died: V8's fatal error (a heap out
/// of memory), the signal `workerd` got. (Not wrangler's `[ERROR]` lines: the Worker logs one
/// for every origin request that fails.) The last five at most.
pub fn crash_lines(tail: &str) -> Vec<String> {
    const SIGNS: [&str; 5] = ["fatal", "out of memory", "Received signal", "Aborted", "Segmentation fault"];
    let lines: Vec<String> =
        tail.lines().filter(|l| SIGNS.iter().any(|s| l.contains(s))).map(|l| l.chars().take(200).collect()).collect();
    lines[lines.len().saturating_sub(5)..].to_vec()
}

/// The last `bytes` of a file (from a line start), for logs too long to read whole.
pub fn log_tail(path: &Path, bytes: u64) -> String {
    use std::io::{Read as _, Seek as _};
    let Ok(mut file) = std::fs::File::open(path) else { return String::new() };
    let len = file.metadata().map_or(0, |m| m.len());
    let _ = file.seek(std::io::SeekFrom::Start(len.saturating_sub(bytes)));
    let mut buf = Vec::new();
    let _ = file.read_to_end(&mut buf);
    let text = String::from_utf8_lossy(&buf);
    match text.find('\n') {
        Some(i) if len > bytes => text[i + 1..].to_owned(),
        _ => text.into_owned(),
    }
}

/// Automatic rebuilds an origin's log shows, by reason (`reason="..."` of "starting an
/// automatic rebuild").
pub fn automatic_rebuilds(text: &str) -> Vec<String> {
    text.lines()
        .filter(|l| l.contains("starting an automatic rebuild"))
        .filter_map(|l| {
            let rest = &l[l.find("reason=")? + "reason=".len()..];
            let rest = rest.strip_prefix('"').unwrap_or(rest);
            Some(rest.split('"').next().unwrap_or(rest).trim().to_owned())
        })
        .collect()
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

    #[test]
    fn panics_and_rebuild_reasons_are_found_in_logs() {
        let log = "INFO ok\nthread 'tokio-runtime-worker' panicked at origin/src/gate.rs:10:5:\n\
                   2025 WARN bloomgate_origin::recovery: starting an automatic rebuild filter=chaos reason=\"more keys than capacity\"\n";
        assert_eq!(panic_lines(log).len(), 1);
        assert_eq!(automatic_rebuilds(log), vec!["more keys than capacity".to_owned()]);
    }

    #[test]
    fn the_edge_log_says_how_workerd_died() {
        // The end of a wrangler log whose workerd died after 1,075 s of a 35-minute run.
        let tail = "GET /v1/filters/chaos/keys/ed2a -> 200\nPOST /v1/filters/chaos/lookups -> 200\n\
                    \u{1b}[31m✘ [ERROR] manifest chaos: Error: Network connection lost.\n\
                    <--- Last few GCs --->\n\
                    [18361:0x73a8ffa92000]  1075950 ms: Mark-Compact (reduce) 1121.4 (1402.2) -> 1121.4 (1402.2) MB\n\
                    V8 fatal error; location = Reached heap limit; message = : allocation failed: JavaScript heap out of memory\n\
                    *** Received signal #6: Aborted\n";
        let lines = crash_lines(tail);
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(lines[0].contains("heap out of memory"));
        let path = std::env::temp_dir().join(format!("bloomgate-chaos-tail-{}.log", rand::random::<u64>()));
        std::fs::write(&path, "first line\nsecond line\nthird\n").unwrap();
        assert_eq!(log_tail(&path, 14), "third\n", "starts at a whole line");
        assert_eq!(log_tail(&path, 1000), "first line\nsecond line\nthird\n");
        std::fs::remove_file(&path).unwrap();
    }
}
