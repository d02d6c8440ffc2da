//! The command-line spelling of every [`Config`](bloomgate_origin::config::Config) setting: `--max-batch`
//! for `max_batch`. Each flag is optional; the ones given are serialized into a map that
//! overrides the file and the environment (`Config::load`). A test holds the flags and the
//! settings to the same names, so a new setting cannot be left without its flag.

use clap::Args;
use serde::Serialize;
use std::net::SocketAddr;
use std::path::PathBuf;

/// Settings given as flags; absent ones leave the file's, the environment's or the default.
#[derive(Args, Debug, Default, Serialize)]
pub struct ConfigFlags {
    /// Address to listen on.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub listen: Option<SocketAddr>,
    /// Admin listener: metrics, readiness, OpenAPI and status page, off the public port.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub admin_listen: Option<SocketAddr>,
    /// The only origin on its database: allow an in-process filter over Cassandra (unsafe with more).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub single_origin: Option<bool>,
    /// Redis URL for the shared filter ("" or unset: in-process filter).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub redis_url: Option<String>,
    /// Redis ACL user.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub redis_user: Option<String>,
    /// Redis password (prefer BLOOMGATE_REDIS_PASSWORD or --redis-password-file: flags show in ps).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub redis_password: Option<String>,
    /// File holding the Redis password.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub redis_password_file: Option<PathBuf>,
    /// PEM CA certificates a rediss:// server must chain to (instead of the platform's).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub redis_tls_ca_file: Option<PathBuf>,
    /// PEM client certificate for Redis.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub redis_tls_client_cert_file: Option<PathBuf>,
    /// PEM private key of the Redis client certificate.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub redis_tls_client_key_file: Option<PathBuf>,
    /// Redis Cluster nodes, comma-separated redis://host:port (replaces --redis-url).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub redis_cluster_nodes: Option<String>,
    /// Redis Cluster: replicas that must confirm each add before it is acknowledged (0: none).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub redis_min_replicas_acked: Option<u32>,
    /// Redis per-call timeout of lookups, ms.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub redis_timeout_ms: Option<u64>,
    /// Redis per-call timeout of writes and segment reads, ms.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub redis_write_timeout_ms: Option<u64>,
    /// Cassandra contact points, comma-separated host:port (unset: embedded key file).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cassandra_nodes: Option<String>,
    /// Cassandra user (PasswordAuthenticator).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cassandra_user: Option<String>,
    /// Cassandra password (prefer BLOOMGATE_CASSANDRA_PASSWORD or --cassandra-password-file: flags show in ps).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cassandra_password: Option<String>,
    /// File holding the Cassandra password.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cassandra_password_file: Option<PathBuf>,
    /// Connect to Cassandra over TLS.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cassandra_tls: Option<bool>,
    /// PEM CA certificates Cassandra's certificates must chain to (instead of the platform's).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cassandra_tls_ca_file: Option<PathBuf>,
    /// PEM client certificate for Cassandra.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cassandra_tls_client_cert_file: Option<PathBuf>,
    /// PEM private key of the Cassandra client certificate.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cassandra_tls_client_key_file: Option<PathBuf>,
    /// The name every Cassandra node's certificate must carry (else the node's IP address).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cassandra_tls_server_name: Option<String>,
    /// Cassandra keyspace.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cassandra_keyspace: Option<String>,
    /// Replication clause used when creating the keyspace.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cassandra_replication: Option<String>,
    /// Create the Cassandra keyspace and tables if missing (false: only check they exist).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cassandra_manage_schema: Option<bool>,
    /// Cassandra consistency (one, local_one, quorum, local_quorum, each_quorum, all).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cassandra_consistency: Option<String>,
    /// Cassandra per-request timeout, ms.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cassandra_timeout_ms: Option<u64>,
    /// The most two origins' clocks may differ by, ms: deletes are stamped this far back.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delete_skew_margin_ms: Option<u64>,
    /// Directory of the embedded key file.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data_dir: Option<PathBuf>,
    /// Writer bearer tokens, comma-separated.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub writer_tokens: Option<String>,
    /// Read-only ops bearer tokens (stats and the filter list), comma-separated.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ops_tokens: Option<String>,
    /// Secret the edge presents to read manifests, segments and journals.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub edge_secret: Option<String>,
    /// Requests of each class in flight before 429 (0: derived from the memory budget).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_in_flight: Option<usize>,
    /// Memory the in-flight caps are derived from, bytes (0: the cgroup's limit, or the machine's).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_budget_bytes: Option<u64>,
    /// Open client connections at once.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_connections: Option<usize>,
    /// Request head (and keep-alive idle) timeout, ms.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub header_read_timeout_ms: Option<u64>,
    /// Largest filter a create, rebuild or resize may ask for, bytes of bits.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_filter_bytes: Option<u64>,
    /// Whole-request timeout, ms.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_timeout_ms: Option<u64>,
    /// How long a write that finds the filter's bits lost waits for a rebuild's generation, ms.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub write_recovery_wait_ms: Option<u64>,
    /// Keys per batch request.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_batch: Option<usize>,
    /// Bytes of a stored value.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_value_bytes: Option<usize>,
    /// Bytes of filter bits held in process (0 = none).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub local_copy_max_bytes: Option<u64>,
    /// How local copies answer "no" for filters created without a mode: lease or barrier.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub read_consistency: Option<bloomgate_client::api::ReadConsistency>,
    /// L: a local copy answers "no" from memory this long after its last journal read was sent, ms.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub read_lease_ms: Option<u64>,
    /// h: a leased local copy in use reads its journal this often, ms.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub read_lease_tail_ms: Option<u64>,
    /// ρ: bound on any origin's clock-rate error, parts per million.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clock_drift_ppm: Option<u32>,
    /// Metadata cache time, ms.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub meta_cache_ms: Option<u64>,
    /// Keep the insert journal edges catch up from (false: edges refetch changed segments).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub journal_enabled: Option<bool>,
    /// Entries a generation's journal keeps.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub journal_max_entries: Option<u64>,
    /// How long journal entries are kept, ms.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub journal_max_age_ms: Option<u64>,
    /// Seconds clients are told to wait in Retry-After.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_after_secs: Option<u64>,
    /// Consult the filter (false: every lookup reads the database, the A/B baseline).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub filter_enabled: Option<bool>,
    /// Serve the status page at /status (no token; for internal ports).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status_page: Option<bool>,
    /// Automatic rebuild checks every this many ms (0: off).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recovery_interval_ms: Option<u64>,
    /// Rebuilds the recovery check runs at once (the others wait their turn, lost bits first).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recovery_max_rebuilds: Option<usize>,
    /// Checkpoint every filter's bits into the database every this many ms (0: off).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub checkpoint_interval_ms: Option<u64>,
    /// Optional wait before a rebuild's scan, ms.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rebuild_settle_ms: Option<u64>,
    /// How long a replaced generation is kept, ms.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rebuild_grace_ms: Option<u64>,
    /// Concurrent token-range scans in a rebuild.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rebuild_concurrency: Option<usize>,
    /// Bytes of new bits a rebuild holds at once (larger filters: one scan per run of segments).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rebuild_memory_bytes: Option<u64>,
    /// A rebuild's lease without renewal, ms (then another origin takes it over).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rebuild_lease_ms: Option<u64>,
    /// Automatic resize when estimated keys exceed capacity times this.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub auto_resize_at_fill: Option<f64>,
    /// Automatic rebuild when the observed false-positive rate exceeds the target times this.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub auto_fp_factor: Option<f64>,
    /// ...over at least this many lookups of absent keys.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub auto_fp_min_samples: Option<u64>,
    /// Automatic rebuild when deletes since the build exceed this share of the keys.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub auto_stale_delete_share: Option<f64>,
    /// At most one automatic rebuild for drift per this many ms per filter.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub auto_rebuild_min_interval_ms: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use bloomgate_origin::config::Config;
    use clap::{CommandFactory, Parser};

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        flags: ConfigFlags,
    }

    #[test]
    fn every_setting_has_a_flag_and_every_flag_is_a_setting() {
        let flags: Vec<String> =
            Cli::command().get_arguments().map(|a| a.get_id().as_str().to_owned()).filter(|id| id != "help").collect();
        let mut flags_sorted = flags.clone();
        flags_sorted.sort();
        let mut settings = Config::setting_names();
        settings.sort();
        assert_eq!(flags_sorted, settings);
    }

    #[test]
    fn flags_left_out_override_nothing() {
        assert_eq!(serde_json::to_value(ConfigFlags::default()).unwrap(), serde_json::json!({}));
        let given = Cli::try_parse_from(["x", "--max-batch", "7", "--writer-tokens", "a,b"]).unwrap();
        assert_eq!(
            serde_json::to_value(given.flags).unwrap(),
            serde_json::json!({ "max_batch": 7, "writer_tokens": "a,b" })
        );
    }
}
