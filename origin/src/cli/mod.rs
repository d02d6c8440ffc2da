//! The `bloomgate-origin` command line: the commands and their arguments, and which function
//! runs each. Serving and rebuilding connect to the stores (`serve`), and `schema apply` and
//! `upgrade` to Cassandra alone (`schema`, `upgrade`); every other command is a call to a running origin through
//! `bloomgate-client` (`filters`, `keys`), at `--origin` (http:// or https://, with
//! `--ca-file` for a private CA), authenticated by `--token` or `BLOOMGATE_TOKEN`: a writer
//! token, or an ops token for `stats` and `list`.
//!
//! # Layout
//! - `serve`: `serve`, `rebuild` and `check-config`, which read the settings.
//! - `schema`: `schema print` and `schema apply`, the Cassandra schema's migrations, with the
//!   settings `serve` reads.
//! - `upgrade`: `upgrade status` and `upgrade finish`, the cluster version read and raised.
//! - `config_flags`: every setting as a flag.
//! - `filters`: `create`, `list`, `stats`, `drop`; `stats_table` draws `stats` for people.
//! - `keys`: `lookup` and `load`; `bulk_load` reads, checks and sends a file of keys.

mod bulk_load;
mod config_flags;
mod filters;
mod keys;
mod schema;
mod serve;
mod stats_table;
mod upgrade;

use bloomgate_client::{Client, Error};
use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

/// bloomgate origin: a Bloom-filter gate in front of Cassandra.
#[derive(Parser)]
#[command(version, about)]
pub struct Cli {
    /// Log lines as text for people, or as one JSON object per line for log pipelines.
    #[arg(long, global = true, env = "BLOOMGATE_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// How log lines are written (to stderr; the level comes from `RUST_LOG`, default `info`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line (timestamp, level, target, fields, span).
    Json,
}

/// The commands.
#[derive(Subcommand)]
pub enum Command {
    /// Serve the HTTP API.
    Serve(Box<serve::ServeArgs>),
    /// Rebuild a filter online from the database into a new generation (optionally resized),
    /// in this process, connected to the stores as `serve` is.
    Rebuild(Box<serve::RebuildArgs>),
    /// Check the settings `serve` would run with (same file, environment and flags) without
    /// connecting to anything: prints "ok", or the problem and exits non-zero.
    CheckConfig(Box<serve::ServeArgs>),
    /// The Cassandra schema: print its CQL for cqlsh, or apply the migrations the keyspace
    /// lacks (what a Kubernetes Job runs before origins of a new version roll out).
    #[command(subcommand)]
    Schema(schema::SchemaCommand),
    /// The cluster version: see it with the origins running, or raise it to this release's
    /// once every origin runs this release (the last step of a rolling upgrade).
    #[command(subcommand)]
    Upgrade(upgrade::UpgradeCommand),
    /// Create a filter on a running origin (or confirm one with the same definition exists).
    Create(filters::CreateArgs),
    /// List the filters of a running origin.
    List(filters::ListArgs),
    /// Print a filter's stats from a running origin: generations, fill, observed false
    /// positives, stale deletes, and a running rebuild's progress with its ETA.
    Stats(filters::StatsArgs),
    /// Drop a filter on a running origin: its bits, journal and definition; its keys in the
    /// database are kept unless `--keys delete`.
    Drop(filters::DropArgs),
    /// Look keys up through a running origin (or an edge).
    Lookup(keys::LookupArgs),
    /// Bulk-load keys (one per line) into a filter through a running origin's write API.
    Load(keys::LoadArgs),
}

/// The running origin a command calls, and the token it calls with.
#[derive(Args, Clone, Debug)]
pub struct Origin {
    /// Origin base URL: http://HOST:PORT or https://HOST:PORT.
    #[arg(long, env = "BLOOMGATE_ORIGIN_URL", default_value = "http://127.0.0.1:8080")]
    origin: String,
    /// Bearer token: a writer token, or an ops token for `stats` and `list`.
    #[arg(long, env = "BLOOMGATE_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// A PEM file of CA certificates to trust, beside the system's, for an https:// origin
    /// whose certificate a CA of your own signed.
    #[arg(long, env = "BLOOMGATE_CA_FILE")]
    ca_file: Option<PathBuf>,
}

impl Origin {
    /// A client of the origin, with the token and the CA file if given; an error that says
    /// which setting to fix otherwise.
    fn client(&self) -> anyhow::Result<Client> {
        let mut builder = Client::builder(&self.origin);
        if let Some(token) = &self.token {
            builder = builder.token(token);
        }
        if let Some(ca_file) = &self.ca_file {
            builder = builder.ca_file(ca_file);
        }
        builder.build().map_err(|e| match e {
            Error::InvalidUrl { .. } => anyhow::anyhow!("--origin (BLOOMGATE_ORIGIN_URL): {e}"),
            Error::InvalidCa { .. } => anyhow::anyhow!("--ca-file (BLOOMGATE_CA_FILE): {e}"),
            Error::InvalidToken { .. } => anyhow::anyhow!("--token (BLOOMGATE_TOKEN): {e}"),
            e => anyhow::anyhow!("{e}"),
        })
    }

    /// The token, which `command` cannot do without.
    fn token(&self, command: &str) -> anyhow::Result<&str> {
        self.token.as_deref().ok_or_else(|| {
            anyhow::anyhow!("`{command}` needs a token: pass --token or set BLOOMGATE_TOKEN (a writer token)")
        })
    }

    /// What a failed call means for the person who typed the command.
    fn failed(&self, what: &str, e: Error) -> anyhow::Error {
        match e {
            Error::Connect { cause, .. } => {
                anyhow::anyhow!("cannot reach the origin at {}: is it running? ({cause})", self.origin)
            }
            e => anyhow::anyhow!("{what}: {e}"),
        }
    }
}

/// Runs a command to its end.
pub async fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Serve(args) => serve::serve(*args).await,
        Command::Rebuild(args) => serve::rebuild(*args).await,
        Command::CheckConfig(args) => match serve::check_config(*args) {
            Ok(_) => {
                println!("ok");
                Ok(())
            }
            Err(problem) => {
                // The message alone, for scripts to show: no backtrace, whatever RUST_BACKTRACE says.
                eprintln!("bloomgate-origin check-config: {problem:#}");
                std::process::exit(1);
            }
        },
        Command::Schema(command) => {
            let name = command.name();
            if let Err(problem) = schema::run(command, &mut std::io::stdout()).await {
                eprintln!("bloomgate-origin {name}: {problem:#}");
                std::process::exit(1);
            }
            Ok(())
        }
        Command::Upgrade(command) => {
            let name = command.name();
            if let Err(problem) = upgrade::run(command, &mut std::io::stdout()).await {
                eprintln!("bloomgate-origin {name}: {problem:#}");
                std::process::exit(1);
            }
            Ok(())
        }
        Command::Create(args) => filters::create(args, &mut std::io::stdout()).await,
        Command::List(args) => filters::list(args, &mut std::io::stdout()).await,
        Command::Stats(args) => filters::stats(args, &mut std::io::stdout()).await,
        Command::Drop(args) => filters::drop(args, &mut std::io::stdout()).await,
        Command::Lookup(args) => keys::lookup(args, &mut std::io::stdout()).await,
        Command::Load(args) => keys::load(args).await,
    }
}

#[cfg(test)]
mod tests;
