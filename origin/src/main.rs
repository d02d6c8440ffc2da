//! `bloomgate-origin` command line: parses arguments, starts tracing, and runs a command.
#![forbid(unsafe_code)]

use anyhow::Context;
use bloomgate_origin::config::Config;
use bloomgate_origin::config_flags::ConfigFlags;
use bloomgate_origin::load::{load, LoadOptions};
use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

/// bloomgate origin: a Bloom-filter gate in front of Cassandra.
#[derive(Parser)]
#[command(version, about)]
struct Cli {
    /// Log lines as text for people, or as one JSON object per line for log pipelines.
    #[arg(long, global = true, env = "BLOOMGATE_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

/// How log lines are written (to stderr; the level comes from `RUST_LOG`, default `info`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line (timestamp, level, target, fields, span).
    Json,
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
    /// Check the settings `serve` would run with (same file, environment and flags) without
    /// connecting to anything: prints "ok", or the problem and exits non-zero.
    CheckConfig(Box<ServeArgs>),
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
    /// Print the origin's JSON instead of the table.
    #[arg(long)]
    json: bool,
}

/// Flags override `BLOOMGATE_*` variables, which override the config file, which overrides
/// the defaults (`Config::load`).
#[derive(Args)]
struct ServeArgs {
    /// TOML config file.
    #[arg(long, env = "BLOOMGATE_CONFIG")]
    config: Option<PathBuf>,
    /// Every setting, as a flag.
    #[command(flatten)]
    settings: ConfigFlags,
}

impl ServeArgs {
    fn into_config(self) -> anyhow::Result<Config> {
        Ok(Config::load(self.config.as_deref(), &self.settings)?)
    }
}

/// `check-config`: what `serve` would refuse before it connects to a store (a bad value, a
/// short token or secret), found by the same code `serve` runs, so scripts fail early with
/// the origin's own message.
fn check_config(args: ServeArgs) -> anyhow::Result<Config> {
    let config = args.into_config()?;
    config.validate()?;
    Ok(config)
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

/// mimalloc instead of glibc's malloc: per-thread free lists suit a server that allocates and
/// frees small buffers on every request (see BENCHMARKS.md, "The origin's cost per no").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let logs = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        .with_writer(std::io::stderr);
    match cli.log_format {
        LogFormat::Text => logs.init(),
        LogFormat::Json => logs.json().init(),
    }
    match cli.command {
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
                gate.database().clone(),
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
        Command::CheckConfig(args) => match check_config(*args) {
            Ok(_) => println!("ok"),
            Err(problem) => {
                // The message alone, for scripts to show: no backtrace, whatever RUST_BACKTRACE says.
                eprintln!("bloomgate-origin check-config: {problem:#}");
                std::process::exit(1);
            }
        },
        Command::Stats(args) => {
            let client = bloomgate_client::Client::new(&args.origin).with_token(&args.token);
            let stats = client.stats(&args.filter).await.map_err(|e| match e {
                bloomgate_client::Error::Transport(e) => {
                    anyhow::anyhow!("cannot reach the origin at {}: is it running? ({e})", args.origin)
                }
                e => anyhow::anyhow!("stats of {:?}: {e}", args.filter),
            })?;
            let stats = serde_json::to_value(&stats)?;
            match args.json {
                true => println!("{}", serde_json::to_string_pretty(&stats)?),
                false => print!("{}", bloomgate_origin::stats_table::render(&stats)),
            }
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

    fn check(args: &[&str]) -> anyhow::Result<Config> {
        let cli = Cli::try_parse_from([&["bloomgate-origin", "check-config"], args].concat()).unwrap();
        match cli.command {
            Command::CheckConfig(args) => check_config(*args),
            _ => unreachable!(),
        }
    }

    #[test]
    fn check_config_refuses_what_serve_would_refuse_with_the_same_message() {
        let err = check(&["--edge-secret", "dev-edge-secret"]).unwrap_err().to_string();
        assert!(err.contains("edge_secret must be at least 16 characters"), "{err}");
        let err = check(&["--writer-tokens", "short"]).unwrap_err().to_string();
        assert!(err.contains("writer tokens must be at least 16 characters"), "{err}");
        let err = check(&["--max-batch", "0"]).unwrap_err().to_string();
        assert!(err.contains("max_batch"), "{err}");
        let ok = check(&["--edge-secret", "dev-edge-secret-0123", "--max-batch", "7"]).unwrap();
        assert_eq!(ok.max_batch, 7, "check-config reads the flags serve reads");
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
            "--writer-tokens",
            "aaaaaaaaaaaaaaaa,bbbbbbbbbbbbbbbb",
            "--ops-tokens",
            "cccccccccccccccc",
        ]);
        assert_eq!(c.redis_write_timeout_ms, 1234, "was parsed and silently ignored");
        assert_eq!((c.max_filter_bytes, c.rebuild_grace_ms), (99, 7));
        assert_eq!((c.header_read_timeout_ms, c.max_connections), (8, 9));
        assert!(!c.journal_enabled);
        assert!(!c.cassandra_manage_schema);
        assert_eq!(c.writer_tokens, ["aaaaaaaaaaaaaaaa", "bbbbbbbbbbbbbbbb"]);
        assert_eq!(c.ops_tokens, ["cccccccccccccccc"]);
    }
}
