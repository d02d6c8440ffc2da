//! Configuration: a TOML file, then `BLOOMGATE_*` environment variables, then flags, each
//! overriding the one before. Every limit lives here, none in the code.

use serde::Deserialize;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// The origin's whole configuration, with defaults for a laptop.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Address to serve HTTP on.
    pub listen: SocketAddr,
    /// Redis URL for the shared filter; unset = the filter lives in this process.
    pub redis_url: Option<String>,
    /// Per-call Redis timeout of lookups in ms; slower counts as "filter unavailable".
    pub redis_timeout_ms: u64,
    /// Per-call Redis timeout of writes (adds) and segment reads in ms.
    pub redis_write_timeout_ms: u64,
    /// Cassandra contact points (`host:port`); empty = keys in an embedded file.
    pub cassandra_nodes: Vec<String>,
    /// Cassandra keyspace.
    pub cassandra_keyspace: String,
    /// Replication clause used when creating the keyspace.
    pub cassandra_replication: String,
    /// Create the keyspace and tables at start if missing. `false`, for operators who manage
    /// schema themselves: create nothing, check at start that they exist with the columns
    /// bloomgate uses, and otherwise fail printing the CQL to run.
    pub cassandra_manage_schema: bool,
    /// Consistency for reads and writes: `one`, `local_one`, `quorum`, `local_quorum`, `all`.
    pub cassandra_consistency: String,
    /// Per-request Cassandra timeout in ms.
    pub cassandra_timeout_ms: u64,
    /// Directory for the embedded key file (quick start only).
    pub data_dir: PathBuf,
    /// Bearer tokens accepted on the write API. Empty = writes refused.
    pub writer_tokens: Vec<String>,
    /// Secret the edge sends in `x-bloomgate-edge-secret` to read manifests and segments.
    pub edge_secret: Option<String>,
    /// Requests handled at once; above it the answer is 429.
    pub max_in_flight: usize,
    /// Open client connections at once; more wait in the listen backlog.
    pub max_connections: usize,
    /// A connection that has not sent a complete request head within this many ms (idle
    /// keep-alive connections included) is closed.
    pub header_read_timeout_ms: u64,
    /// Largest filter, in bytes of bits, that a create, rebuild or automatic resize may ask
    /// for: checked before anything is stored.
    pub max_filter_bytes: u64,
    /// Whole-request timeout in ms.
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
    /// Seconds clients are told to wait in `Retry-After`.
    pub retry_after_secs: u64,
    /// Consult the filter at all. `false` sends every lookup to the key store: the A/B baseline.
    pub filter_enabled: bool,
    /// How often to check filters for lost bits or drift and rebuild on its own, in ms; 0 = off.
    pub recovery_interval_ms: u64,
    /// Wait between naming a rebuild's generation and scanning, in ms. Not needed for
    /// correctness (writes re-read the state after the key store; see `rebuild`); 0 = none.
    pub rebuild_settle_ms: u64,
    /// How long a replaced generation is kept for edges and caches, in ms. Keep it above the
    /// edges' FRESHNESS_SECS and `meta_cache_ms`.
    pub rebuild_grace_ms: u64,
    /// Concurrent token-range scans in a rebuild.
    pub rebuild_concurrency: usize,
    /// How long a rebuild's lease lives without renewal, in ms: a rebuild whose origin died is
    /// taken over by another origin's recovery check this long after.
    pub rebuild_lease_ms: u64,
    /// Automatic resize when estimated keys exceed capacity × this.
    pub auto_resize_at_fill: f64,
    /// Automatic rebuild when the observed false-positive rate exceeds the target × this.
    pub auto_fp_factor: f64,
    /// ...over at least this many lookups of absent keys.
    pub auto_fp_min_samples: u64,
    /// Automatic rebuild when deletes since the build exceed this share of the keys.
    pub auto_stale_delete_share: f64,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            redis_url: None,
            redis_timeout_ms: 50,
            redis_write_timeout_ms: 1000,
            cassandra_nodes: Vec::new(),
            cassandra_keyspace: "bloomgate".into(),
            cassandra_replication: "{'class': 'SimpleStrategy', 'replication_factor': 1}".into(),
            cassandra_manage_schema: true,
            cassandra_consistency: "local_quorum".into(),
            cassandra_timeout_ms: 2000,
            data_dir: PathBuf::from(".state/origin"),
            writer_tokens: Vec::new(),
            edge_secret: None,
            max_in_flight: 512,
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
            retry_after_secs: 1,
            filter_enabled: true,
            recovery_interval_ms: 5000,
            rebuild_settle_ms: 0,
            rebuild_grace_ms: 10_000,
            rebuild_concurrency: 4,
            rebuild_lease_ms: 30_000,
            // Above 1.0: the estimate from the fill ratio is noisy, and a filter loaded exactly to
            // capacity should not be resized half the time.
            auto_resize_at_fill: 1.1,
            auto_fp_factor: 3.0,
            auto_fp_min_samples: 10_000,
            auto_stale_delete_share: 0.2,
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
    /// Reads a TOML file (all fields optional).
    pub fn from_file(path: &std::path::Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|cause| ConfigError::Read { path: path.into(), cause })?;
        toml::from_str(&text).map_err(|e| ConfigError::Parse { path: path.into(), cause: e.to_string() })
    }

    /// Checks the values that would otherwise fail later, and obscurely.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let positive = [
            ("max_in_flight", self.max_in_flight as u64),
            ("max_connections", self.max_connections as u64),
            ("header_read_timeout_ms", self.header_read_timeout_ms),
            ("max_filter_bytes", self.max_filter_bytes),
            ("rebuild_lease_ms", self.rebuild_lease_ms),
            ("journal_max_entries", self.journal_max_entries),
            ("journal_max_age_ms", self.journal_max_age_ms),
            ("max_batch", self.max_batch as u64),
            ("request_timeout_ms", self.request_timeout_ms),
            ("redis_timeout_ms", self.redis_timeout_ms),
            ("redis_write_timeout_ms", self.redis_write_timeout_ms),
            ("cassandra_timeout_ms", self.cassandra_timeout_ms),
        ];
        if let Some((name, _)) = positive.iter().find(|(_, v)| *v == 0) {
            return Err(ConfigError::Invalid(format!("{name} must be greater than 0")));
        }
        self.consistency()?;
        if self.writer_tokens.iter().any(|t| t.len() < 16) {
            return Err(ConfigError::Invalid("writer tokens must be at least 16 characters".into()));
        }
        if self.edge_secret.as_ref().is_some_and(|s| s.len() < 16) {
            return Err(ConfigError::Invalid(
                "edge_secret must be at least 16 characters (leave it unset to turn the edge endpoints off)".into(),
            ));
        }
        Ok(())
    }

    /// The Cassandra consistency level named in the config.
    pub fn consistency(&self) -> Result<scylla::statement::Consistency, ConfigError> {
        use scylla::statement::Consistency::*;
        Ok(match self.cassandra_consistency.to_ascii_lowercase().as_str() {
            "one" => One,
            "local_one" => LocalOne,
            "quorum" => Quorum,
            "local_quorum" => LocalQuorum,
            "each_quorum" => EachQuorum,
            "all" => All,
            other => {
                return Err(ConfigError::Invalid(format!(
                "cassandra_consistency {other:?} is not one of one, local_one, quorum, local_quorum, each_quorum, all"
            )))
            }
        })
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

    /// Rebuild settings from this config.
    pub fn rebuild_options(&self, progress: bool) -> crate::rebuild::RebuildOptions {
        crate::rebuild::RebuildOptions {
            capacity: None,
            fp_rate: None,
            concurrency: self.rebuild_concurrency.max(1),
            settle: Duration::from_millis(self.rebuild_settle_ms),
            grace: Duration::from_millis(self.rebuild_grace_ms),
            lease_ttl: Duration::from_millis(self.rebuild_lease_ms),
            max_filter_bytes: self.max_filter_bytes,
            progress,
            journal: self.journal_enabled,
        }
    }

    /// Thresholds of automatic rebuilds.
    pub fn thresholds(&self) -> crate::recovery::Thresholds {
        crate::recovery::Thresholds {
            resize_at_fill: self.auto_resize_at_fill,
            fp_factor: self.auto_fp_factor,
            fp_min_samples: self.auto_fp_min_samples,
            stale_delete_share: self.auto_stale_delete_share,
            // Its own rebuild retires `previous` after the grace period; one that is still
            // named well after that (grace twice over, plus a lease expiry) was orphaned.
            retire_previous_after_ms: 2 * self.rebuild_grace_ms + self.rebuild_lease_ms,
        }
    }

    /// How long journals keep their entries.
    pub fn journal_retention(&self) -> crate::store::JournalRetention {
        crate::store::JournalRetention {
            max_entries: self.journal_max_entries,
            max_age: Duration::from_millis(self.journal_max_age_ms),
        }
    }

    /// Header read (and keep-alive idle) timeout.
    pub fn header_read_timeout(&self) -> Duration {
        Duration::from_millis(self.header_read_timeout_ms)
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
    fn validation_names_the_field() {
        let c = Config { max_in_flight: 0, ..Config::default() };
        assert!(c.validate().unwrap_err().to_string().contains("max_in_flight"));
        let c = Config { cassandra_consistency: "most".into(), ..Config::default() };
        assert!(c.validate().unwrap_err().to_string().contains("most"));
        let c = Config { writer_tokens: vec!["short".into()], ..Config::default() };
        assert!(c.validate().is_err());
        let c = Config { edge_secret: Some(String::new()), ..Config::default() };
        assert!(
            c.validate().unwrap_err().to_string().contains("edge_secret"),
            "an empty secret would open the edge endpoints"
        );
        let c = Config { max_filter_bytes: 0, ..Config::default() };
        assert!(c.validate().unwrap_err().to_string().contains("max_filter_bytes"));
        assert!(Config::default().validate().is_ok());
    }
}
