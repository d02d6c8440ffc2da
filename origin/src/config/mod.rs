//! Configuration: defaults, then a TOML file, then `BLOOMGATE_*` environment variables, then
//! flags, each overriding the one before (merged by `figment`). Every limit lives here, none in
//! the code, and every setting has all three spellings: `max_batch` in the file,
//! `BLOOMGATE_MAX_BATCH` in the environment, `--max-batch` on the command line.
//!
//! # Layout
//! - Here: the settings ([`Config`]), their defaults, and the durations and limits derived
//!   from them.
//! - `load`: defaults, file, environment and flags merged, in that order.
//! - `validate`: the values that would otherwise fail later, and obscurely.
//! - `stores`: what the stores are reached with (TLS files, credentials) and the checks of
//!   those settings, among them the refusal of a filter private to one origin over a shared
//!   database.
//! - `env_names`: the `BLOOMGATE_*` names this binary reads, and the nearest one to a typo.

mod env_names;
mod load;
mod stores;
mod validate;

pub use env_names::BINARY_ENV;
pub use stores::{FilterHome, TlsFiles};

use crate::lease::{LeaseSettings, LeaseTerms, ReadConsistency};
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// The prefix of the environment variables that set [`Config`] fields.
pub const ENV_PREFIX: &str = "BLOOMGATE_";

/// The origin's whole configuration, with defaults for a laptop.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Address to serve HTTP on: the API (`/v1`) and liveness, and, unless `admin_listen` is
    /// set, metrics, readiness, the OpenAPI document and the status page too.
    pub listen: SocketAddr,
    /// Address of a second listener for operators: metrics, readiness, liveness, the OpenAPI
    /// document and the status page, which `listen` then no longer serves. Set it wherever
    /// `listen` is reachable from outside (the edge reaches the origin over the internet).
    pub admin_listen: Option<SocketAddr>,
    /// This origin is the only one on its database: allows a filter in this process (no
    /// `redis_url`) over a shared database (`cassandra_nodes`). Unsafe with two or more origins:
    /// each would hold a filter the other's writes never reach, and answer "not seen" for keys
    /// acknowledged through the other.
    pub single_origin: bool,
    /// Redis URL for the shared filter (`redis://host:port/db`, or `rediss://` over TLS); unset
    /// = the filter lives in this process.
    pub redis_url: Option<String>,
    /// Redis ACL user (else the URL's, else the `default` user).
    pub redis_user: Option<String>,
    /// Redis password (else the URL's); better given as `BLOOMGATE_REDIS_PASSWORD` from a
    /// secret, or in `redis_password_file`.
    pub redis_password: Option<String>,
    /// File holding the Redis password (trailing newline ignored).
    pub redis_password_file: Option<PathBuf>,
    /// PEM file of the CA certificates a `rediss://` server's certificate must chain to, in
    /// place of the platform's roots.
    pub redis_tls_ca_file: Option<PathBuf>,
    /// PEM client certificate (chain) for Redis servers that ask for one (`tls-auth-clients`).
    pub redis_tls_client_cert_file: Option<PathBuf>,
    /// PEM private key of `redis_tls_client_cert_file`.
    pub redis_tls_client_key_file: Option<PathBuf>,
    /// Nodes of a Redis Cluster holding the shared filter (`redis://host:port`; any few of its
    /// masters, the client learns the rest). Set, it replaces `redis_url`.
    #[serde(deserialize_with = "load::list_or_commas")]
    pub redis_cluster_nodes: Vec<String>,
    /// In a Redis Cluster: replicas that must confirm every add (`WAIT`) before the write is
    /// acknowledged, capped, for each master the add went to, at the replicas that master has
    /// connected (so a master whose replica was just promoted does not stop writes, nor turn
    /// the wait off for the others); 0 = do not wait.
    pub redis_min_replicas_acked: u32,
    /// Per-call Redis timeout of lookups in ms; slower counts as "filter unavailable".
    pub redis_timeout_ms: u64,
    /// Per-call Redis timeout of writes (adds) and segment reads in ms.
    pub redis_write_timeout_ms: u64,
    /// Cassandra contact points (`host:port`); empty = keys in an embedded file.
    #[serde(deserialize_with = "load::list_or_commas")]
    pub cassandra_nodes: Vec<String>,
    /// Cassandra user (PasswordAuthenticator); unset = no authentication.
    pub cassandra_user: Option<String>,
    /// Cassandra password; better given as `BLOOMGATE_CASSANDRA_PASSWORD` from a secret, or in
    /// `cassandra_password_file`.
    pub cassandra_password: Option<String>,
    /// File holding the Cassandra password (trailing newline ignored).
    pub cassandra_password_file: Option<PathBuf>,
    /// Connect to Cassandra over TLS (client encryption), verifying each node's certificate.
    pub cassandra_tls: bool,
    /// PEM file of the CA certificates Cassandra's certificates must chain to, in place of the
    /// platform's roots.
    pub cassandra_tls_ca_file: Option<PathBuf>,
    /// PEM client certificate (chain) for clusters that require one (`require_client_auth`).
    pub cassandra_tls_client_cert_file: Option<PathBuf>,
    /// PEM private key of `cassandra_tls_client_cert_file`.
    pub cassandra_tls_client_key_file: Option<PathBuf>,
    /// The name every node's certificate must carry. Unset, each node's certificate must name
    /// the node's IP address (the driver reaches nodes by address); set it when the cluster's
    /// certificates carry one DNS name for all nodes.
    pub cassandra_tls_server_name: Option<String>,
    /// Cassandra keyspace.
    pub cassandra_keyspace: String,
    /// Replication clause a keyspace that does not exist is created with, e.g.
    /// `{'class': 'NetworkTopologyStrategy', 'dc1': 3}`. Empty (the default) = unset: creating
    /// the keyspace is then refused, naming the clause to set, so no keyspace gets a single
    /// replica without someone asking for it.
    pub cassandra_replication: String,
    /// Apply the schema's pending migrations at start (`bloomgate-origin schema apply`'s code),
    /// creating the keyspace if missing, as tests and `scripts/dev` do. `false`, where a Job or an
    /// operator applies the schema: apply nothing, and refuse a keyspace whose recorded schema
    /// version is not this build's (saying to run `schema apply`, or to upgrade this origin).
    pub cassandra_manage_schema: bool,
    /// Consistency for reads and writes: `one`, `local_one`, `quorum`, `local_quorum`, `all`.
    pub cassandra_consistency: String,
    /// Per-request Cassandra timeout in ms.
    pub cassandra_timeout_ms: u64,
    /// The most two origins' clocks may differ by, in ms. Writes and deletes of keys carry the
    /// origin's own timestamp, deletes this far ahead, and a delete is acknowledged only after
    /// twice this: so a delete removes every write acknowledged before it, and every write sent
    /// after its acknowledgement outranks it in Cassandra (last write wins).
    pub delete_skew_margin_ms: u64,
    /// Directory for the embedded key file (quick start only).
    pub data_dir: PathBuf,
    /// Bearer tokens accepted on the write API (and everything an ops token may read). Empty =
    /// writes refused.
    #[serde(deserialize_with = "load::list_or_commas")]
    pub writer_tokens: Vec<String>,
    /// Read-only bearer tokens, for dashboards and operators: they read a filter's stats and
    /// the filter list, and are refused (403) on every write. Empty = none.
    #[serde(deserialize_with = "load::list_or_commas")]
    pub ops_tokens: Vec<String>,
    /// Secret the edge sends in `x-bloomgate-edge-secret` to read manifests and segments.
    pub edge_secret: Option<String>,
    /// Requests of each class (single-key lookups; writes and batches) handled at once, above
    /// which the answer is 429, whatever they cost in memory. 0 = derived from the memory budget
    /// (see `admission`), which is what holds the origin's memory under any burst.
    pub max_in_flight: usize,
    /// The memory the origin may use, in bytes, that its in-flight caps are derived from. 0 =
    /// its cgroup's limit (a container's memory limit), or the machine's memory. Never above
    /// the cgroup's limit: set higher, the limit is used.
    pub memory_budget_bytes: u64,
    /// Open client connections at once; more wait in the listen backlog.
    pub max_connections: usize,
    /// A connection that has not sent a complete request head within this many ms (idle
    /// keep-alive connections included) is closed, at most half as long again later (its
    /// watchdog ticks every half of it).
    pub header_read_timeout_ms: u64,
    /// Largest filter, in bytes of bits, that a create, rebuild or automatic resize may ask
    /// for: checked before anything is stored.
    pub max_filter_bytes: u64,
    /// Whole-request timeout in ms (single-key lookups excepted: each store call on their path
    /// has its own timeout, so they need no timer of their own).
    pub request_timeout_ms: u64,
    /// Keys per batch request.
    pub max_batch: usize,
    /// Bytes of a stored value.
    pub max_value_bytes: usize,
    /// How long a filter's metadata is cached in process, in ms.
    pub meta_cache_ms: u64,
    /// Give the generations this origin names (creates, rebuilds) an insert journal, so edges
    /// catch up on writes by fetching the writes instead of whole segments. `false` = edges
    /// fetch changed segments whole (A/B). Recorded in the generation: adds to a generation
    /// with a journal append to it whatever the adding origin's setting, so origins that
    /// disagree never hide an add from an edge.
    pub journal_enabled: bool,
    /// Entries a generation's journal keeps (one per add call; approximately).
    pub journal_max_entries: u64,
    /// How long journal entries are kept, in ms: an edge further behind fetches segments whole.
    pub journal_max_age_ms: u64,
    /// Bytes of filter bits this origin may hold in process (0 = none). A filter whose
    /// readable generation keeps an insert journal and fits is copied here on its first lookup
    /// and kept current from the journal behind a read barrier: a "no" then costs one shared
    /// journal read per Redis round trip instead of one Redis call per lookup, and a write
    /// acknowledged through any origin is still never answered "no".
    pub local_copy_max_bytes: u64,
    /// How origins answer "no" from their local copies of filters created here without a
    /// `read_consistency` of their own (and of filters whose choice was lost with the filter
    /// state): `lease` (no Redis call per "no"; writes wait `read_lease_ms` a little stretched)
    /// or `barrier` (a Redis round trip per "no", shared by concurrent lookups; writes do not
    /// wait). Recorded in each generation when it is named.
    pub read_consistency: ReadConsistency,
    /// L: how long after its last complete journal read was sent a local copy answers "no" from
    /// memory, in ms (at most 1000). Recorded in each generation named in `lease` mode; writes to
    /// it are acknowledged L·(1+ρ)/(1−ρ) after their filter add answered, overlapped with the
    /// database write.
    pub read_lease_ms: u64,
    /// h: how often a leased local copy in use reads its journal in the background to keep its
    /// lease alive, in ms (less than `read_lease_ms`): one small Redis call per held filter per
    /// h while lookups come, one a second when idle.
    pub read_lease_tail_ms: u64,
    /// ρ: the bound on how far any origin's clock *rate* may be from real time, in parts per
    /// million (at most 100000). Clocks need not agree, only tick at about the same speed; NTP
    /// slews by at most 500.
    pub clock_drift_ppm: u32,
    /// Seconds clients are told to wait in `Retry-After`.
    pub retry_after_secs: u64,
    /// Consult the filter at all. `false` sends every lookup to the database: the A/B baseline.
    pub filter_enabled: bool,
    /// Serve the status page (`/status`, `/status/data`) without a token: per filter, fill and
    /// false-positive rates against the target, lookups by who answered, database reads saved,
    /// rebuild progress. Off by default; turn it on where the origin's port is internal.
    pub status_page: bool,
    /// How often to check filters for lost bits or drift and rebuild on its own, in ms; 0 = off.
    pub recovery_interval_ms: u64,
    /// Rebuilds this origin's recovery check runs at once. After one loss that takes many
    /// filters (Redis restarted empty), the others wait their turn, lost bits before drift:
    /// each rebuild then gets the database's scan throughput to itself, and the first filters
    /// are back sooner.
    pub recovery_max_rebuilds: usize,
    /// How often each filter's active generation is checkpointed into the database (only its
    /// segments changed since the last round), in ms; 0 = off. A filter whose bits Redis lost
    /// is then recovered from its checkpoint and the writes logged since, instead of a scan of
    /// every key. Every origin runs the rounds; a filter checkpointed lately by any origin is
    /// skipped.
    pub checkpoint_interval_ms: u64,
    /// How long a write that finds the filter's bits lost (Redis back empty or from an older
    /// snapshot, metadata or a segment gone) waits for a rebuild to name a generation that can
    /// take it, in ms, before it is refused with 503; 0 = refuse at once. Below
    /// `request_timeout_ms`.
    pub write_recovery_wait_ms: u64,
    /// Wait between naming a rebuild's generation and scanning, in ms. Not needed for
    /// correctness (writes re-read the state after the database; see `rebuild`); 0 = none.
    pub rebuild_settle_ms: u64,
    /// How long a replaced generation is kept for edges and caches, in ms. Keep it above the
    /// edges' FRESHNESS_SECS and `meta_cache_ms`.
    pub rebuild_grace_ms: u64,
    /// Concurrent token-range scans in a rebuild.
    pub rebuild_concurrency: usize,
    /// Bytes of new bits a rebuild holds in this process at once. A filter larger than this is
    /// built in runs of segments, scanning the database once per run: memory stays bounded at
    /// any size, at the cost of more scans, which other origins share (`rebuild::help`). At
    /// least one segment is held, whatever the value.
    pub rebuild_memory_bytes: u64,
    /// How long a rebuild's lease lives without renewal, in ms: a rebuild whose origin died is
    /// taken over by another origin's recovery check this long after.
    pub rebuild_lease_ms: u64,
    /// Automatic resize when estimated keys exceed capacity × this.
    pub auto_resize_at_fill: f64,
    /// Automatic rebuild when the observed false-positive rate exceeds the target × this.
    pub auto_fp_factor: f64,
    /// ...over at least this many distinct absent keys looked up (keys, not lookups: a key
    /// asked again counts once, so repeating known false positives does not trip it).
    pub auto_fp_min_samples: u64,
    /// Automatic rebuild when deletes since the build exceed this share of the keys.
    pub auto_stale_delete_share: f64,
    /// At most one automatic rebuild for drift (false positives, deleted keys) per this many ms
    /// per filter: one runs only once the active generation is this old. Lost bits and resizes
    /// are rebuilt at once.
    pub auto_rebuild_min_interval_ms: u64,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            admin_listen: None,
            single_origin: false,
            redis_url: None,
            redis_user: None,
            redis_password: None,
            redis_password_file: None,
            redis_tls_ca_file: None,
            redis_tls_client_cert_file: None,
            redis_tls_client_key_file: None,
            redis_cluster_nodes: Vec::new(),
            redis_min_replicas_acked: 1,
            redis_timeout_ms: 50,
            redis_write_timeout_ms: 1000,
            cassandra_nodes: Vec::new(),
            cassandra_user: None,
            cassandra_password: None,
            cassandra_password_file: None,
            cassandra_tls: false,
            cassandra_tls_ca_file: None,
            cassandra_tls_client_cert_file: None,
            cassandra_tls_client_key_file: None,
            cassandra_tls_server_name: None,
            cassandra_keyspace: "bloomgate".into(),
            cassandra_replication: String::new(),
            cassandra_manage_schema: true,
            cassandra_consistency: "local_quorum".into(),
            cassandra_timeout_ms: 2000,
            delete_skew_margin_ms: 1000,
            data_dir: PathBuf::from(".state/origin"),
            writer_tokens: Vec::new(),
            ops_tokens: Vec::new(),
            edge_secret: None,
            max_in_flight: 0,
            memory_budget_bytes: 0,
            max_connections: 4096,
            header_read_timeout_ms: 30_000,
            max_filter_bytes: 4 << 30,
            request_timeout_ms: 5000,
            max_batch: 1000,
            max_value_bytes: 4096,
            meta_cache_ms: 1000,
            journal_enabled: true,
            journal_max_entries: 200_000,
            journal_max_age_ms: 600_000,
            local_copy_max_bytes: 256 << 20,
            read_consistency: ReadConsistency::Lease,
            read_lease_ms: 10,
            read_lease_tail_ms: crate::lease::DEFAULT_TAIL_EVERY.as_millis() as u64,
            clock_drift_ppm: 1_000,
            retry_after_secs: 1,
            filter_enabled: true,
            status_page: false,
            recovery_interval_ms: 5000,
            recovery_max_rebuilds: 2,
            checkpoint_interval_ms: 60_000,
            write_recovery_wait_ms: 3000,
            rebuild_settle_ms: 0,
            rebuild_grace_ms: 10_000,
            rebuild_concurrency: 4,
            rebuild_memory_bytes: 128 << 20,
            rebuild_lease_ms: 30_000,
            // Above 1.0: the estimate from the fill ratio is noisy, and a filter loaded exactly to
            // capacity should not be resized half the time.
            auto_resize_at_fill: 1.1,
            auto_fp_factor: 3.0,
            auto_fp_min_samples: 10_000,
            auto_stale_delete_share: 0.2,
            auto_rebuild_min_interval_ms: 600_000,
        }
    }
}

/// Why a configuration was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config file {path}: {cause}")]
    Read {
        /// File path.
        path: PathBuf,
        /// Underlying error.
        cause: std::io::Error,
    },
    /// The file is not valid TOML for this config.
    #[error("config file {path} is invalid: {cause}")]
    Parse {
        /// File path.
        path: PathBuf,
        /// Parser message (names the field).
        cause: String,
    },
    /// A value is out of range.
    #[error("invalid configuration: {0}")]
    Invalid(String),
}

impl Config {
    /// The names of every setting, as the file spells them.
    pub fn setting_names() -> Vec<String> {
        match serde_json::to_value(Config::default()) {
            Ok(serde_json::Value::Object(fields)) => fields.keys().cloned().collect(),
            _ => unreachable!("Config serializes to a map"),
        }
    }

    /// Redis timeout.
    pub fn redis_timeout(&self) -> Duration {
        Duration::from_millis(self.redis_timeout_ms)
    }

    /// Redis write timeout.
    pub fn redis_write_timeout(&self) -> Duration {
        Duration::from_millis(self.redis_write_timeout_ms)
    }

    /// Cassandra timeout.
    pub fn cassandra_timeout(&self) -> Duration {
        Duration::from_millis(self.cassandra_timeout_ms)
    }

    /// Whole-request timeout.
    pub fn request_timeout(&self) -> Duration {
        Duration::from_millis(self.request_timeout_ms)
    }

    /// Header read (and keep-alive idle) timeout.
    pub fn header_read_timeout(&self) -> Duration {
        Duration::from_millis(self.header_read_timeout_ms)
    }

    /// What the generations this origin names record of read leases: its terms, unless the
    /// filter store is in process (no other origin can hold a copy of it).
    pub fn lease_settings(&self) -> LeaseSettings {
        let in_process = self.filter_home() == FilterHome::InProcess;
        let terms = LeaseTerms::new(Duration::from_millis(self.read_lease_ms), self.clock_drift_ppm);
        LeaseSettings { default_mode: self.read_consistency, terms: (!in_process).then_some(terms) }
    }

    /// h.
    pub fn read_lease_tail(&self) -> Duration {
        Duration::from_millis(self.read_lease_tail_ms)
    }

    /// Largest request body: a full batch of the longest keys, plus JSON overhead.
    pub fn max_body_bytes(&self) -> usize {
        (self.max_batch * (2 * bloomgate_filter::MAX_KEY_BYTES + 8)).max(self.max_value_bytes) + 1024
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_values_override_defaults_and_unknown_keys_are_refused() {
        let c: Config = toml::from_str("listen = \"0.0.0.0:9000\"\nmax_batch = 10\n").unwrap();
        assert_eq!(c.listen.port(), 9000);
        assert_eq!(c.max_batch, 10);
        assert_eq!(c.redis_timeout_ms, 50);
        assert!(c.cassandra_manage_schema, "the origin creates its schema unless told not to");
        let c: Config = toml::from_str("cassandra_manage_schema = false\n").unwrap();
        assert!(!c.cassandra_manage_schema);
        let err = toml::from_str::<Config>("max_batchh = 10\n").unwrap_err().to_string();
        assert!(err.contains("max_batchh"), "{err}");
    }

    #[test]
    fn the_local_edge_secret_example_is_one_the_origin_accepts() {
        let file = include_str!("../../../.dev.vars.example");
        let line = file.lines().find(|l| l.starts_with("EDGE_SECRET=")).expect("EDGE_SECRET= line");
        let secret = line.trim_start_matches("EDGE_SECRET=").trim_matches('"');
        let c = Config { edge_secret: Some(secret.into()), ..Config::default() };
        c.validate().expect("wrangler dev and the origin share this secret: the origin must accept it");
    }

    #[test]
    fn the_operations_guide_documents_every_setting() {
        let guide = include_str!("../../../docs/operations.md");
        let section = guide.split("\n## Configuration").nth(1).expect("docs/operations.md has a Configuration section");
        let section = section.split("\n## ").next().unwrap_or_default();
        let missing: Vec<String> =
            Config::setting_names().into_iter().filter(|n| !section.contains(&format!("`{n}`"))).collect();
        assert!(missing.is_empty(), "the Configuration table of docs/operations.md lacks {missing:?}");
    }
}
