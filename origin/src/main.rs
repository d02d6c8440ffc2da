//! `bloomgate-origin` command line: parses arguments, starts tracing, and runs a command (see
//! `cli`).
#![forbid(unsafe_code)]

mod cli;

use clap::Parser;
use cli::{Cli, LogFormat};

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
    cli::run(cli.command).await
}
