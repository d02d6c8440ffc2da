//! The processes of a chaos run: a private `redis-server` (one proxy in front of it per
//! origin, for slow-Redis faults) or the shared Redis Cluster, N origins as separate OS
//! processes ([`origin_process`](crate::origin_process)), and `wrangler dev` pointed at origin 0
//! through a proxy that can cut it. Cassandra is the shared one ([`cassandra`](crate::cassandra)).

use crate::origin_process::{origin_toml, Origin, OriginRedis, OriginTuning};
use crate::schedule::RedisKind;
use anyhow::Context as _;
use bloomgate_tests::edge::{Options, Wrangler};
use bloomgate_tests::fault_proxy::ChaosProxy;
use bloomgate_tests::origin::EDGE_SECRET;
use bloomgate_tests::redis_server::RedisServer;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

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

/// The origin the edge forwards to (through a proxy that can cut it).
pub const EDGE_ORIGIN: u8 = 0;

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
    /// The worker build `wrangler dev` serves (default: `edge/build`).
    pub edge_build: Option<PathBuf>,
    /// A known bug planted in the origins (`BG_PLANTED_BUG`) and the edge (`PLANTED_BUG`).
    pub planted_bug: Option<String>,
    /// An earlier release's `bloomgate-chaos`, which the odd-numbered origins run.
    pub previous_release: Option<PathBuf>,
}

impl ClusterSettings {
    /// The executable origin `index` runs: an earlier release's for odd indexes when one is
    /// given (a rolling upgrade half done), else this build.
    pub fn origin_exe(&self, index: usize) -> PathBuf {
        match &self.previous_release {
            Some(previous) if index % 2 == 1 => previous.clone(),
            _ => self.exe.clone(),
        }
    }

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
            let port = bloomgate_tests::free_port()?;
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
            let log = settings.dir.join(format!("origin-{index}.log"));
            let mut origin = Origin::new(index as u8, port, settings.origin_exe(index), config, log, redis_proxy);
            origin.planted_bug = settings.planted_bug.clone();
            origin.start(http).await?;
            origins.push(origin);
        }
        let edge = if settings.edge {
            let proxy = ChaosProxy::start(origins[EDGE_ORIGIN as usize].base.trim_start_matches("http://")).await;
            let mut options = Options::new(settings.freshness_secs);
            options.build = settings.edge_build.clone();
            if let Some(bug) = &settings.planted_bug {
                options.vars.push(("PLANTED_BUG".into(), bug.clone()));
            }
            let wrangler = Wrangler::start_with(&format!("http://{}", proxy.addr), EDGE_SECRET, options).await;
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
