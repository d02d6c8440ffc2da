//! The shared filter in Redis: plain bitmaps, one string per segment, plus a version counter
//! per segment and one metadata key per filter naming the active generation.
//!
//! Keys (hash tags keep a segment's bits and version in one Cluster slot, while different
//! segments spread over slots):
//!
//! ```text
//! bg:{<filter>}:meta                 JSON FilterState: active, building, previous generations,
//!                                    each with the Redis incarnation (run_id) holding its bits
//! bg:{<filter>}:lease                owner of the rebuild lease (with expiry)
//! bg:{<filter>}:deletes:<gen>        keys deleted whose bits generation <gen> still holds
//! bg:{<filter>}:progress             JSON BuildProgress of a running rebuild (expires)
//! bg:{<filter>}:jnl:<gen>            stream: the generation's insert journal, one entry per add
//!                                    (field `h`: the added keys' 16-byte hashes; `init` marks
//!                                    the entry written when the generation was created)
//! bg:{<filter>}:jstep:<gen>          hash `format` (1), `from`, `to`: the span of journal ids adds were given
//!                                    ahead of Redis's clock (it stepped back); expires with the
//!                                    journal's retention
//! bg:{<filter>}:runs:<gen>           a rebuild's board: `plan` (JSON, formatted) and `done:<i>`
//! bg:{<filter>}:run:<gen>:<i>        a builder's claim on run <i> (with expiry)
//! bg:{<filter>:<gen>:<seg>}:bits     the segment's payload (bit p of the string = Redis bit p)
//! bg:{<filter>:<gen>:<seg>}:ver      integer, bumped by every add that changed a bit; the
//!                                    string `retired` (expiring) once the generation is retired,
//!                                    `lost` once an add found the segment half gone
//! ```
//!
//! The trap: `GETRANGE`/`GETBIT` on a missing key read as zeros, i.e. "certainly not seen".
//! Every read here checks the key exists at its full size, and every add runs in a script that
//! refuses to create a segment, so a flushed or evicted filter reads as *unavailable*.
//!
//! Every call goes over a [`RedisLink`], which knows the incarnation of the process it reached
//! (its `run_id` and replication history): a call about a generation of another incarnation is
//! refused before it is sent. Every read or write of bits is a script, and every script checks
//! again, inside Redis and atomically with its work, that the process running it, with its
//! history, is one the generation was created on (a process demoted and resynchronised keeps
//! its connections). On a Redis Cluster ([`ClusterLink`]) every key above lives in its hash
//! tag's slot: a filter's metadata and journal in one, each segment in its own, and an add is
//! one script per touched segment followed by the journal append (see `write`).
//!
//! # Layout
//! - [`link`]: the connection to a single Redis, which knows the incarnation it reached.
//! - [`cluster`]: the connection to a Redis Cluster, and which processes hold its slots.
//! - [`conn`]: one connection type over both, and how every call goes (timeout, incarnation
//!   check, telling the link how it went).
//! - `scripts`: the Lua scripts (`scripts/*.lua`, each opening with its KEYS/ARGV contract).
//! - `keys`: the key names above.
//! - `state`: a filter's state, read by every path.
//! - By role (see `store::roles`): `lookup` (one block of bits), `write`
//!   (adds and delete counts), `feed` (segments and the journal, for local copies and edges),
//!   `stats` (fill, deletes, memory, progress, whole segments), `lifecycle` (generations
//!   created, merged, retired and cleared; the rebuild lease).

pub mod cluster;
pub mod conn;
mod feed;
mod keys;
mod lifecycle;
pub mod link;
mod lookup;
mod scripts;
mod state;
mod stats;
mod write;

use super::{FilterStore, FilterUnavailable, JournalRetention, StoreResult};
use async_trait::async_trait;
use cluster::ClusterLink;
use link::RedisLink;
use scripts::Scripts;
use std::time::Duration;
use tracing::warn;

/// Connection settings.
#[derive(Clone, Debug)]
pub struct RedisSettings {
    /// How long insert journals keep their entries.
    pub journal: JournalRetention,
    /// `redis://host:port/db` of a single Redis (ignored when `cluster_nodes` is set).
    pub url: String,
    /// Any of a Redis Cluster's nodes (`redis://host:port`); empty = a single Redis at `url`.
    pub cluster_nodes: Vec<String>,
    /// In a cluster: replicas that must have every add (`WAIT`) before it is acknowledged,
    /// capped, for each master the add went to, at the replicas that master has; 0 = do not
    /// wait.
    pub min_replicas_acked: u32,
    /// Per-call timeout of lookups: slower than this counts as unavailable and falls through.
    pub timeout: Duration,
    /// Per-call timeout of adds and other heavy calls: a write may wait longer than a lookup
    /// (a timed-out add fails the write, which the caller retries).
    pub write_timeout: Duration,
    /// Who the origin is to Redis, and the TLS material of `rediss://` connections.
    pub access: RedisAccess,
}

/// Who the origin is to Redis (an ACL user and password, over those in the URLs), and the TLS
/// material of `rediss://` connections (without it: the platform's roots, no client
/// certificate).
#[derive(Clone, Default)]
pub struct RedisAccess {
    /// ACL user.
    pub user: Option<String>,
    /// Password of the user (or of `default`).
    pub password: Option<String>,
    /// CA certificates and client certificate.
    pub tls: Option<redis::TlsCertificates>,
}

impl std::fmt::Debug for RedisAccess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the password, and never certificates or keys.
        f.debug_struct("RedisAccess")
            .field("user", &self.user)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("tls", &self.tls.as_ref().map(|_| "<files>"))
            .finish()
    }
}

impl RedisAccess {
    /// A client of the single Redis at `url`, with these credentials and TLS material.
    fn single_client(&self, url: &str) -> StoreResult<redis::Client> {
        // The URL is not repeated in errors: it may hold a password.
        let bad = |e: redis::RedisError| FilterUnavailable::Error(format!("redis_url: {e}"));
        let mut info = redis::IntoConnectionInfo::into_connection_info(url).map_err(bad)?;
        let mut redis = info.redis_settings().clone();
        if let Some(user) = &self.user {
            redis = redis.set_username(user);
        }
        if let Some(password) = &self.password {
            redis = redis.set_password(password);
        }
        info = info.set_redis_settings(redis);
        let tls_url = matches!(info.addr(), redis::ConnectionAddr::TcpTls { .. });
        match (&self.tls, tls_url) {
            (Some(certificates), true) => redis::Client::build_with_tls(info, certificates.clone()).map_err(bad),
            _ => redis::Client::open(info).map_err(bad),
        }
    }

    /// A Redis Cluster client's builder over `nodes`, with these credentials and TLS material.
    fn cluster_builder(&self, nodes: &[String]) -> redis::cluster::ClusterClientBuilder {
        let mut builder = redis::cluster::ClusterClientBuilder::new(nodes.iter().map(String::as_str));
        if let Some(user) = &self.user {
            builder = builder.username(user);
        }
        if let Some(password) = &self.password {
            builder = builder.password(password);
        }
        let tls_urls = nodes.iter().all(|n| n.starts_with("rediss://"));
        match (&self.tls, tls_urls) {
            (Some(certificates), true) => builder.certs(certificates.clone()),
            _ => builder,
        }
    }
}

/// The filter in Redis.
#[derive(Clone)]
pub struct RedisFilterStore {
    backend: Backend,
    scripts: Scripts,
    /// In a cluster: replicas that must have every add (see `RedisSettings`).
    min_replicas_acked: u32,
    journal: JournalRetention,
    /// Lookups' per-call timeout.
    timeout: Duration,
    /// Everything else's per-call timeout.
    write_timeout: Duration,
}

/// How the store reaches Redis.
#[derive(Clone)]
enum Backend {
    /// One Redis; the connection knows the incarnation it reached.
    Single(RedisLink),
    /// A Redis Cluster; scripts check the incarnation inside Redis.
    Cluster(ClusterLink),
}

impl RedisFilterStore {
    /// Connected lazily, a single Redis and a cluster alike: the origin starts (and answers
    /// from the database) even while Redis is down, and connects in the background.
    pub async fn connect(settings: &RedisSettings) -> StoreResult<RedisFilterStore> {
        let slowest = settings.write_timeout.max(settings.timeout);
        let connect_timeout = settings.write_timeout.max(Duration::from_millis(250));
        let backend = match settings.cluster_nodes.as_slice() {
            [] => {
                let client = settings.access.single_client(&settings.url)?;
                Backend::Single(RedisLink::new(client, slowest, connect_timeout))
            }
            nodes => {
                let builder = settings.access.cluster_builder(nodes);
                Backend::Cluster(ClusterLink::connect(builder, slowest, connect_timeout).await?)
            }
        };
        Ok(RedisFilterStore {
            backend,
            scripts: Scripts::new(),
            min_replicas_acked: settings.min_replicas_acked,
            journal: settings.journal,
            timeout: settings.timeout,
            write_timeout: settings.write_timeout,
        })
    }

    /// Warns loudly when Redis may evict our keys. Eviction is survivable (missing keys fall
    /// through) but silently turns the filter off until a rebuild.
    pub async fn check_eviction_policy(&self) {
        let policy: Result<Vec<String>, _> = self
            .call(self.write_timeout, None, |mut c| async move {
                redis::cmd("CONFIG").arg("GET").arg("maxmemory-policy").query_async(&mut c).await
            })
            .await;
        match policy.as_deref() {
            Ok([_, policy]) if policy.starts_with("allkeys-") => warn!(
                policy = %policy,
                "Redis maxmemory-policy can evict filter segments; lookups will fall through to Cassandra until a rebuild. Set maxmemory-policy noeviction."
            ),
            Ok(_) => {}
            Err(err) => warn!(cause = %err, "could not read Redis maxmemory-policy"),
        }
    }
}

#[async_trait]
impl FilterStore for RedisFilterStore {
    async fn ping(&self) -> StoreResult<()> {
        self.call(self.timeout, None, |mut c| async move { redis::cmd("PING").query_async::<String>(&mut c).await })
            .await
            .map(|_| ())
    }
}
