//! Configuration: defaults, then a TOML file, then `BLOOMGATE_*` environment variables, then
//! flags, each overriding the one before (merged by `figment`). Every limit lives here, none in
//! the code, and every setting has all three spellings: `max_batch` in the file,
//! `BLOOMGATE_MAX_BATCH` in the environment, `--max-batch` on the command line.

use figment::providers::{Format, Serialized, Toml};
use figment::Figment;
use serde::{Deserialize, Deserializer, Serialize};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The prefix of the environment variables that set [`Config`] fields.
pub const ENV_PREFIX: &str = "BLOOMGATE_";

/// The origin's whole configuration, with defaults for a laptop.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Address to serve HTTP on.
    pub listen: SocketAddr,
    /// Redis URL for the shared filter; unset = the filter lives in this process.
    pub redis_url: Option<String>,
    /// Nodes of a Redis Cluster holding the shared filter (`redis://host:port`; any few of its
    /// masters, the client learns the rest). Set, it replaces `redis_url`.
    #[serde(deserialize_with = "list_or_commas")]
    pub redis_cluster_nodes: Vec<String>,
    /// In a Redis Cluster: replicas that must confirm every add (`WAIT`) before the write is
    /// acknowledged, capped at the fewest replicas a master has (so a master whose replica
    /// was just promoted does not stop writes); 0 = do not wait.
    pub redis_min_replicas_acked: u32,
    /// Per-call Redis timeout of lookups in ms; slower counts as "filter unavailable".
    pub redis_timeout_ms: u64,
    /// Per-call Redis timeout of writes (adds) and segment reads in ms.
    pub redis_write_timeout_ms: u64,
    /// Cassandra contact points (`host:port`); empty = keys in an embedded file.
    #[serde(deserialize_with = "list_or_commas")]
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
    /// Bearer tokens accepted on the write API (and everything an ops token may read). Empty =
    /// writes refused.
    #[serde(deserialize_with = "list_or_commas")]
    pub writer_tokens: Vec<String>,
    /// Read-only bearer tokens, for dashboards and operators: they read a filter's stats and
    /// the filter list, and are refused (403) on every write. Empty = none.
    #[serde(deserialize_with = "list_or_commas")]
    pub ops_tokens: Vec<String>,
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
    /// Wait between naming a rebuild's generation and scanning, in ms. Not needed for
    /// correctness (writes re-read the state after the database; see `rebuild`); 0 = none.
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
            redis_cluster_nodes: Vec::new(),
            redis_min_replicas_acked: 1,
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
            ops_tokens: Vec::new(),
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
            local_copy_max_bytes: 256 << 20,
            retry_after_secs: 1,
            filter_enabled: true,
            status_page: false,
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

/// The settings named by `BLOOMGATE_*` environment variables, typed by the setting: a number or
/// boolean setting's value is parsed as one, every other value is kept as the exact text.
/// (figment's own `Env` guesses a type from the text, so a secret of digits would become a
/// number and `0042…` would lose its zeros.)
struct EnvSettings(serde_json::Map<String, serde_json::Value>);

impl EnvSettings {
    fn read(env: impl IntoIterator<Item = (String, String)>) -> EnvSettings {
        let defaults = match serde_json::to_value(Config::default()) {
            Ok(serde_json::Value::Object(fields)) => fields,
            _ => unreachable!("Config serializes to a map"),
        };
        let mut settings = serde_json::Map::new();
        for (name, raw) in env {
            let Some(setting) = name.strip_prefix(ENV_PREFIX).map(str::to_ascii_lowercase) else { continue };
            let Some(default) = defaults.get(&setting) else { continue };
            let value = match default {
                serde_json::Value::Number(_) | serde_json::Value::Bool(_) => {
                    serde_json::from_str(raw.trim()).unwrap_or(serde_json::Value::String(raw))
                }
                _ => serde_json::Value::String(raw),
            };
            settings.insert(setting, value);
        }
        EnvSettings(settings)
    }
}

impl figment::Provider for EnvSettings {
    fn metadata(&self) -> figment::Metadata {
        figment::Metadata::named("BLOOMGATE_* environment variables")
    }

    fn data(&self) -> Result<figment::value::Map<figment::Profile, figment::value::Dict>, figment::Error> {
        Serialized::defaults(&self.0).data()
    }
}

/// A list from a TOML array, or from one comma-separated string (how an environment variable
/// or a flag spells it): `"a, b"` is `["a", "b"]`, `""` is empty.
fn list_or_commas<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum ListOrCommas {
        List(Vec<String>),
        Commas(String),
    }
    let items = match ListOrCommas::deserialize(d)? {
        ListOrCommas::List(items) => items,
        ListOrCommas::Commas(s) => s.split(',').map(str::to_owned).collect(),
    };
    Ok(items.into_iter().map(|i| i.trim().to_owned()).filter(|i| !i.is_empty()).collect())
}

impl Config {
    /// The names of every setting, as the file spells them.
    pub fn setting_names() -> Vec<String> {
        match serde_json::to_value(Config::default()) {
            Ok(serde_json::Value::Object(fields)) => fields.keys().cloned().collect(),
            _ => unreachable!("Config serializes to a map"),
        }
    }

    /// Defaults, then `file` (if given; it must exist), then the process's `BLOOMGATE_*`
    /// environment variables that name a setting, then `flags` (a map of the settings given on
    /// the command line; absent ones are left out). See [`Config::load_from`].
    pub fn load(file: Option<&Path>, flags: &impl Serialize) -> Result<Config, ConfigError> {
        Config::load_from(file, std::env::vars(), flags)
    }

    /// [`Config::load`] with the environment given. Unknown keys in the file are refused;
    /// `BLOOMGATE_*` variables that are not settings (the scripts' and tests' own) are not read.
    pub fn load_from(
        file: Option<&Path>,
        env: impl IntoIterator<Item = (String, String)>,
        flags: &impl Serialize,
    ) -> Result<Config, ConfigError> {
        let mut figment = Figment::from(Serialized::defaults(Config::default()));
        if let Some(path) = file {
            // figment skips a missing file silently; a path the operator named must exist.
            std::fs::metadata(path).map_err(|cause| ConfigError::Read { path: path.into(), cause })?;
            figment = figment.merge(Toml::file_exact(path));
        }
        let config: Config = figment
            .merge(EnvSettings::read(env))
            .merge(Serialized::defaults(flags))
            .extract()
            .map_err(|e| ConfigError::Invalid(e.to_string()))?;
        Ok(config.normalized())
    }

    /// Reads a TOML file over the defaults (all fields optional), without the environment.
    pub fn from_file(path: &Path) -> Result<Config, ConfigError> {
        let no_flags = serde_json::Map::new();
        Config::load_from(Some(path), std::iter::empty(), &no_flags).map_err(|e| match e {
            ConfigError::Invalid(cause) => ConfigError::Parse { path: path.into(), cause },
            other => other,
        })
    }

    /// An empty `redis_url` (e.g. `BLOOMGATE_REDIS_URL=`) means unset, as leaving it out does.
    /// (An empty `edge_secret` stays an error: see `validate`.)
    fn normalized(mut self) -> Config {
        self.redis_url = self.redis_url.filter(|u| !u.trim().is_empty());
        self
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
        if self.ops_tokens.iter().any(|t| t.len() < 16) {
            return Err(ConfigError::Invalid("ops tokens must be at least 16 characters".into()));
        }
        if self.ops_tokens.iter().any(|t| self.writer_tokens.contains(t)) {
            return Err(ConfigError::Invalid(
                "a token is in both writer_tokens and ops_tokens: an ops token must not write; use distinct tokens"
                    .into(),
            ));
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

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn no_flags() -> serde_json::Value {
        serde_json::json!({})
    }

    /// A TOML file of `text` in a directory of its own.
    fn toml_file(name: &str, text: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("bloomgate-config-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    #[test]
    fn the_file_then_the_environment_then_flags_each_override_the_one_before() {
        let file = toml_file("c.toml", "max_batch = 10\nmax_in_flight = 20\nmeta_cache_ms = 30\n");
        let vars = env(&[("BLOOMGATE_MAX_IN_FLIGHT", "21"), ("BLOOMGATE_META_CACHE_MS", "31")]);
        let flags = serde_json::json!({ "meta_cache_ms": 32 });
        let c = Config::load_from(Some(&file), vars, &flags).unwrap();
        assert_eq!((c.max_batch, c.max_in_flight, c.meta_cache_ms), (10, 21, 32));
        assert_eq!(c.redis_timeout_ms, 50, "a setting given nowhere keeps its default");
    }

    #[test]
    fn the_environment_alone_configures_every_kind_of_setting() {
        let vars = env(&[
            ("BLOOMGATE_WRITER_TOKENS", "aaaaaaaaaaaaaaaaaaaa, bbbbbbbbbbbbbbbbbbbb"),
            ("BLOOMGATE_OPS_TOKENS", "cccccccccccccccccccc"),
            ("BLOOMGATE_CASSANDRA_NODES", "10.0.0.1:9042"),
            ("BLOOMGATE_CASSANDRA_REPLICATION", "{'class': 'NetworkTopologyStrategy', 'dc1': 3}"),
            ("BLOOMGATE_LISTEN", "0.0.0.0:9000"),
            ("BLOOMGATE_JOURNAL_ENABLED", "false"),
            ("BLOOMGATE_AUTO_FP_FACTOR", "2.5"),
            ("BLOOMGATE_MAX_FILTER_BYTES", "1073741824"),
            // Secrets of digits stay the exact text: not a number, no zeros lost.
            ("BLOOMGATE_EDGE_SECRET", "00001111222233334444"),
            ("BLOOMGATE_REDIS_URL", ""),
            // The scripts' and tests' own variables share the prefix: not settings, not refused.
            ("BLOOMGATE_TEST_REDIS_URL", "redis://elsewhere/"),
            ("OTHER", "x"),
        ]);
        let c = Config::load_from(None, vars, &no_flags()).unwrap();
        assert_eq!(c.writer_tokens, ["aaaaaaaaaaaaaaaaaaaa", "bbbbbbbbbbbbbbbbbbbb"]);
        assert_eq!(c.ops_tokens, ["cccccccccccccccccccc"]);
        assert_eq!(c.cassandra_nodes, ["10.0.0.1:9042"]);
        assert_eq!(c.cassandra_replication, "{'class': 'NetworkTopologyStrategy', 'dc1': 3}");
        assert_eq!(c.listen.port(), 9000);
        assert!(!c.journal_enabled);
        assert_eq!(c.auto_fp_factor, 2.5);
        assert_eq!(c.max_filter_bytes, 1 << 30);
        assert_eq!(c.edge_secret.as_deref(), Some("00001111222233334444"));
        assert_eq!(c.redis_url, None, "an empty URL means the in-process filter");
        assert_eq!(Config { edge_secret: None, ..c.clone() }.validate().ok(), Some(()));
    }

    #[test]
    fn bad_settings_name_the_setting_and_where_it_came_from() {
        let typo = toml_file("typo.toml", "max_batchh = 10\n");
        let err = Config::load_from(Some(&typo), env(&[]), &no_flags()).unwrap_err().to_string();
        assert!(err.contains("max_batchh") && err.contains("typo.toml"), "{err}");
        let missing = typo.with_file_name("missing.toml");
        let err = Config::load_from(Some(&missing), env(&[]), &no_flags()).unwrap_err().to_string();
        assert!(err.contains("missing.toml"), "{err}");
        let err =
            Config::load_from(None, env(&[("BLOOMGATE_MAX_BATCH", "many")]), &no_flags()).unwrap_err().to_string();
        assert!(err.contains("max_batch") && err.contains("BLOOMGATE_"), "{err}");
        let err =
            Config::load_from(None, env(&[]), &serde_json::json!({ "listen": "nowhere" })).unwrap_err().to_string();
        assert!(err.contains("listen"), "{err}");
    }

    #[test]
    fn the_deployment_environment_file_names_only_settings_and_loads() {
        let file = include_str!("../../../deploy/origin.env.example");
        let names = Config::setting_names();
        let mut vars = Vec::new();
        for line in file.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')) {
            let (name, value) = line.split_once('=').expect("NAME=value");
            let setting = name.strip_prefix(ENV_PREFIX).expect("BLOOMGATE_ prefix").to_ascii_lowercase();
            assert!(names.contains(&setting), "{name} is not a setting");
            vars.push((name.to_owned(), value.to_owned()));
        }
        let c = Config::load_from(None, vars, &no_flags()).unwrap();
        c.validate().unwrap();
        assert_eq!(c.cassandra_nodes.len(), 3);
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

    #[test]
    fn validation_names_the_field() {
        let c = Config { max_in_flight: 0, ..Config::default() };
        assert!(c.validate().unwrap_err().to_string().contains("max_in_flight"));
        let c = Config { cassandra_consistency: "most".into(), ..Config::default() };
        assert!(c.validate().unwrap_err().to_string().contains("most"));
        let c = Config { writer_tokens: vec!["short".into()], ..Config::default() };
        assert!(c.validate().is_err());
        let c = Config { ops_tokens: vec!["short".into()], ..Config::default() };
        assert!(c.validate().unwrap_err().to_string().contains("ops tokens"));
        let both = "0123456789abcdef".to_string();
        let c = Config { writer_tokens: vec![both.clone()], ops_tokens: vec![both], ..Config::default() };
        assert!(c.validate().unwrap_err().to_string().contains("both"), "an ops token that writes is no ops token");
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
