//! `bloomgate-origin` command line: parses arguments, starts tracing, and runs a command.
#![forbid(unsafe_code)]

use anyhow::Context;
use bloomgate_origin::config::Config;
use bloomgate_origin::load::{load, LoadOptions};
use clap::{Args, Parser, Subcommand};
use std::net::SocketAddr;
use std::path::PathBuf;

/// bloomgate origin: a Bloom-filter gate in front of Cassandra.
#[derive(Parser)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the HTTP API.
    Serve(Box<ServeArgs>),
    /// Bulk-load keys (one per line) into a filter through a running origin's write API.
    Load(LoadArgs),
    /// Rebuild a filter online from the database into a new generation (optionally resized).
    Rebuild(Box<RebuildArgs>),
    /// Print a filter's stats from a running origin: generations, fill, observed false
    /// positives, stale deletes, and a running rebuild's progress with its ETA.
    Stats(StatsArgs),
}

#[derive(Args)]
struct StatsArgs {
    /// Filter to describe.
    #[arg(long)]
    filter: String,
    /// Origin base URL.
    #[arg(long, env = "BLOOMGATE_ORIGIN_URL", default_value = "http://127.0.0.1:8080")]
    origin: String,
    /// Writer token.
    #[arg(long, env = "BLOOMGATE_WRITER_TOKEN")]
    token: String,
}

/// Flags override `BLOOMGATE_*` variables, which override the config file.
#[derive(Args)]
struct ServeArgs {
    /// TOML config file.
    #[arg(long, env = "BLOOMGATE_CONFIG")]
    config: Option<PathBuf>,
    /// Address to listen on.
    #[arg(long, env = "BLOOMGATE_LISTEN")]
    listen: Option<SocketAddr>,
    /// Redis URL for the shared filter (unset: in-process filter).
    #[arg(long, env = "BLOOMGATE_REDIS_URL")]
    redis_url: Option<String>,
    /// Redis per-call timeout, ms.
    #[arg(long, env = "BLOOMGATE_REDIS_TIMEOUT_MS")]
    redis_timeout_ms: Option<u64>,
    /// Redis per-call timeout of writes, ms.
    #[arg(long, env = "BLOOMGATE_REDIS_WRITE_TIMEOUT_MS")]
    redis_write_timeout_ms: Option<u64>,
    /// Cassandra contact points, comma-separated host:port (unset: embedded key file).
    #[arg(long, env = "BLOOMGATE_CASSANDRA_NODES", value_delimiter = ',')]
    cassandra_nodes: Option<Vec<String>>,
    /// Cassandra keyspace.
    #[arg(long, env = "BLOOMGATE_CASSANDRA_KEYSPACE")]
    cassandra_keyspace: Option<String>,
    /// Create the Cassandra keyspace and tables if missing (false: only check they exist).
    #[arg(long, env = "BLOOMGATE_CASSANDRA_MANAGE_SCHEMA")]
    cassandra_manage_schema: Option<bool>,
    /// Cassandra consistency (one, local_one, quorum, local_quorum, each_quorum, all).
    #[arg(long, env = "BLOOMGATE_CASSANDRA_CONSISTENCY")]
    cassandra_consistency: Option<String>,
    /// Cassandra per-request timeout, ms.
    #[arg(long, env = "BLOOMGATE_CASSANDRA_TIMEOUT_MS")]
    cassandra_timeout_ms: Option<u64>,
    /// Directory of the embedded key file.
    #[arg(long, env = "BLOOMGATE_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// Writer bearer tokens, comma-separated.
    #[arg(long, env = "BLOOMGATE_WRITER_TOKENS", value_delimiter = ',')]
    writer_tokens: Option<Vec<String>>,
    /// Secret the edge presents to read segments.
    #[arg(long, env = "BLOOMGATE_EDGE_SECRET")]
    edge_secret: Option<String>,
    /// Requests in flight before 429.
    #[arg(long, env = "BLOOMGATE_MAX_IN_FLIGHT")]
    max_in_flight: Option<usize>,
    /// Request timeout, ms.
    #[arg(long, env = "BLOOMGATE_REQUEST_TIMEOUT_MS")]
    request_timeout_ms: Option<u64>,
    /// Keys per batch request.
    #[arg(long, env = "BLOOMGATE_MAX_BATCH")]
    max_batch: Option<usize>,
    /// Metadata cache time, ms.
    #[arg(long, env = "BLOOMGATE_META_CACHE_MS")]
    meta_cache_ms: Option<u64>,
    /// Consult the filter (false: every lookup reads the database, the A/B baseline).
    #[arg(long, env = "BLOOMGATE_FILTER_ENABLED")]
    filter_enabled: Option<bool>,
    /// Open client connections at once.
    #[arg(long, env = "BLOOMGATE_MAX_CONNECTIONS")]
    max_connections: Option<usize>,
    /// Request head (and keep-alive idle) timeout, ms.
    #[arg(long, env = "BLOOMGATE_HEADER_READ_TIMEOUT_MS")]
    header_read_timeout_ms: Option<u64>,
    /// Largest filter a create, rebuild or resize may ask for, bytes of bits.
    #[arg(long, env = "BLOOMGATE_MAX_FILTER_BYTES")]
    max_filter_bytes: Option<u64>,
    /// Automatic rebuild checks every this many ms (0: off).
    #[arg(long, env = "BLOOMGATE_RECOVERY_INTERVAL_MS")]
    recovery_interval_ms: Option<u64>,
    /// Wait before a rebuild's scan, ms.
    #[arg(long, env = "BLOOMGATE_REBUILD_SETTLE_MS")]
    rebuild_settle_ms: Option<u64>,
    /// How long a replaced generation is kept, ms.
    #[arg(long, env = "BLOOMGATE_REBUILD_GRACE_MS")]
    rebuild_grace_ms: Option<u64>,
    /// Keep the insert journal edges catch up from (false: edges refetch changed segments).
    #[arg(long, env = "BLOOMGATE_JOURNAL_ENABLED")]
    journal_enabled: Option<bool>,
    /// Entries a generation's journal keeps.
    #[arg(long, env = "BLOOMGATE_JOURNAL_MAX_ENTRIES")]
    journal_max_entries: Option<u64>,
    /// How long journal entries are kept, ms.
    #[arg(long, env = "BLOOMGATE_JOURNAL_MAX_AGE_MS")]
    journal_max_age_ms: Option<u64>,
}

impl ServeArgs {
    fn into_config(self) -> anyhow::Result<Config> {
        let mut c = match &self.config {
            Some(path) => Config::from_file(path)?,
            None => Config::default(),
        };
        macro_rules! apply {
            ($($field:ident),*) => { $(if let Some(v) = self.$field { c.$field = v; })* };
        }
        apply!(
            listen,
            redis_timeout_ms,
            redis_write_timeout_ms,
            cassandra_nodes,
            cassandra_keyspace,
            cassandra_manage_schema,
            cassandra_consistency,
            cassandra_timeout_ms,
            data_dir,
            writer_tokens,
            max_in_flight,
            request_timeout_ms,
            max_batch,
            meta_cache_ms,
            filter_enabled,
            max_connections,
            header_read_timeout_ms,
            max_filter_bytes,
            recovery_interval_ms,
            rebuild_settle_ms,
            rebuild_grace_ms,
            journal_enabled,
            journal_max_entries,
            journal_max_age_ms
        );
        if self.redis_url.is_some() {
            c.redis_url = self.redis_url;
        }
        if self.edge_secret.is_some() {
            c.edge_secret = self.edge_secret;
        }
        c.redis_url = c.redis_url.filter(|u| !u.is_empty());
        c.cassandra_nodes.retain(|n| !n.is_empty());
        Ok(c)
    }
}

#[derive(Args)]
struct RebuildArgs {
    /// Filter to rebuild.
    #[arg(long)]
    filter: String,
    /// New capacity (resize).
    #[arg(long)]
    capacity: Option<u64>,
    /// New false-positive target.
    #[arg(long)]
    fp_rate: Option<f64>,
    /// Store connections and limits, as for `serve`.
    #[command(flatten)]
    stores: ServeArgs,
}

#[derive(Args)]
struct LoadArgs {
    /// Filter to load into.
    #[arg(long)]
    filter: String,
    /// File of keys, one per line; `-` for stdin.
    file: PathBuf,
    /// Origin base URL.
    #[arg(long, env = "BLOOMGATE_ORIGIN_URL", default_value = "http://127.0.0.1:8080")]
    origin: String,
    /// Writer token.
    #[arg(long, env = "BLOOMGATE_WRITER_TOKEN")]
    token: String,
    /// Keys per request.
    #[arg(long, default_value_t = 500)]
    batch: usize,
    /// Requests in flight.
    #[arg(long, default_value_t = 8)]
    concurrency: usize,
    /// Stop at the first bad line instead of reporting and skipping it.
    #[arg(long)]
    abort_on_bad_line: bool,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        .with_writer(std::io::stderr)
        .init();
    match Cli::parse().command {
        Command::Serve(args) => {
            let config = (*args).into_config()?;
            let listener = tokio::net::TcpListener::bind(config.listen)
                .await
                .with_context(|| format!("cannot listen on {}", config.listen))?;
            tracing::info!(listen = %config.listen, "bloomgate-origin serving");
            let state = bloomgate_origin::build_state(config).await?;
            bloomgate_origin::run(listener, state, shutdown_signal()).await?;
        }
        Command::Rebuild(args) => {
            let RebuildArgs { filter, capacity, fp_rate, stores } = *args;
            let mut config = stores.into_config()?;
            config.recovery_interval_ms = 0; // this process rebuilds one filter, then exits
            let options = bloomgate_origin::rebuild::RebuildOptions {
                capacity,
                fp_rate,
                ..config.rebuild_options(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            };
            let state = bloomgate_origin::build_state(config).await?;
            let gate = state.gate;
            let report = bloomgate_origin::rebuild::rebuild(
                gate.filter_store().clone(),
                gate.key_store().clone(),
                &filter,
                options,
            )
            .await?;
            println!("{}", serde_json::to_string_pretty(&report)?);
        }
        Command::Load(args) => {
            let options = LoadOptions {
                origin: args.origin,
                token: args.token,
                filter: args.filter,
                batch: args.batch,
                concurrency: args.concurrency,
                abort_on_bad_line: args.abort_on_bad_line,
            };
            let report = load(&args.file, &options).await?;
            println!("{report}");
            if report.failed_batches > 0 {
                anyhow::bail!(
                    "{} batches were not stored; rerun the load (writes are idempotent)",
                    report.failed_batches
                );
            }
        }
        Command::Stats(args) => {
            let url = format!("{}/v1/filters/{}/stats", args.origin.trim_end_matches('/'), args.filter);
            let response = reqwest::Client::new()
                .get(&url)
                .bearer_auth(&args.token)
                .send()
                .await
                .with_context(|| format!("cannot reach the origin at {}: is it running?", args.origin))?;
            let status = response.status();
            let body = response.text().await?;
            if !status.is_success() {
                anyhow::bail!("{url} answered {status}: {body}");
            }
            let stats: serde_json::Value = serde_json::from_str(&body).context("the origin's stats are not JSON")?;
            println!("{}", serde_json::to_string_pretty(&stats)?);
        }
    }
    Ok(())
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    let terminate = async {
        if let Ok(mut s) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            s.recv().await;
        }
    };
    tokio::select! { _ = ctrl_c => {}, _ = terminate => {} }
    tracing::info!("shutting down: finishing requests in flight");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn serve_config(args: &[&str]) -> Config {
        let cli = Cli::try_parse_from([&["bloomgate-origin", "serve"], args].concat()).unwrap();
        match cli.command {
            Command::Serve(args) => args.into_config().unwrap(),
            _ => unreachable!(),
        }
    }

    #[test]
    fn every_parsed_flag_reaches_the_config() {
        let c = serve_config(&[
            "--redis-write-timeout-ms",
            "1234",
            "--max-filter-bytes",
            "99",
            "--rebuild-grace-ms",
            "7",
            "--header-read-timeout-ms",
            "8",
            "--max-connections",
            "9",
            "--journal-enabled",
            "false",
            "--cassandra-manage-schema",
            "false",
        ]);
        assert_eq!(c.redis_write_timeout_ms, 1234, "was parsed and silently ignored");
        assert_eq!((c.max_filter_bytes, c.rebuild_grace_ms), (99, 7));
        assert_eq!((c.header_read_timeout_ms, c.max_connections), (8, 9));
        assert!(!c.journal_enabled);
        assert!(!c.cassandra_manage_schema);
        assert_eq!(serve_config(&[]), Config::default());
    }
}
