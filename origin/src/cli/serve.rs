//! The commands that connect to the stores themselves, `serve` and `rebuild`, and the one that
//! checks what `serve` would run with, `check-config`.

use super::config_flags::ConfigFlags;
use bloomgate_origin::config::Config;
use bloomgate_origin::rebuild::RebuildOptions;
use clap::Args;
use std::path::PathBuf;

/// Flags override `BLOOMGATE_*` variables, which override the config file, which overrides
/// the defaults (`Config::load`).
#[derive(Args)]
pub struct ServeArgs {
    /// TOML config file.
    #[arg(long, env = "BLOOMGATE_CONFIG")]
    config: Option<PathBuf>,
    /// Every setting, as a flag.
    #[command(flatten)]
    settings: ConfigFlags,
}

impl ServeArgs {
    /// The configuration these arguments, the file and the environment make.
    pub fn into_config(self) -> anyhow::Result<Config> {
        Ok(Config::load(self.config.as_deref(), &self.settings)?)
    }
}

/// `check-config`: what `serve` would refuse before it connects to a store (a bad value, a
/// short token or secret), found by the same code `serve` runs, so scripts fail early with
/// the origin's own message.
pub fn check_config(args: ServeArgs) -> anyhow::Result<Config> {
    let config = args.into_config()?;
    config.validate()?;
    Ok(config)
}

#[derive(Args)]
pub struct RebuildArgs {
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

/// `serve`: the HTTP API until SIGINT or SIGTERM.
pub async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let config = args.into_config()?;
    let listeners = bloomgate_origin::Listeners::bind(&config).await?;
    match config.admin_listen {
        Some(admin) => tracing::info!(listen = %config.listen, admin_listen = %admin, "bloomgate-origin serving"),
        None => tracing::info!(listen = %config.listen, "bloomgate-origin serving"),
    }
    let state = bloomgate_origin::build_state(config).await?;
    bloomgate_origin::run_listeners(listeners, state, shutdown_signal()).await?;
    Ok(())
}

/// `rebuild`: one filter, in this process, then exit with its report.
pub async fn rebuild(args: RebuildArgs) -> anyhow::Result<()> {
    let RebuildArgs { filter, capacity, fp_rate, stores } = args;
    let mut config = stores.into_config()?;
    config.recovery_interval_ms = 0; // this process rebuilds one filter, then exits
    let options = RebuildOptions {
        capacity,
        fp_rate,
        ..RebuildOptions::from_config(&config, std::io::IsTerminal::is_terminal(&std::io::stderr()))
    };
    let state = bloomgate_origin::build_state(config).await?;
    let gate = state.gate;
    stores_answer(&gate, STORES_PATIENCE).await?;
    let task = gate.start_rebuild(&filter, options).await?;
    let report = task.await.unwrap_or(Err(bloomgate_origin::rebuild::RebuildError::LeaseLost))?;
    println!("{}", serde_json::to_string_pretty(&report)?);
    Ok(())
}

/// How long `rebuild` waits for its stores to answer before it gives up.
const STORES_PATIENCE: std::time::Duration = std::time::Duration::from_secs(60);

/// Waits until both stores answer (the origin connects them in the background), or errs with
/// why one does not after `patience`.
async fn stores_answer(gate: &bloomgate_origin::gate::Gate, patience: std::time::Duration) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + patience;
    loop {
        let (database, filter) = tokio::join!(gate.database_ping(), gate.filter_store_ping());
        let why = match (database, filter) {
            (Ok(()), Ok(())) => return Ok(()),
            (Err(e), _) => e.to_string(),
            (_, Err(e)) => e.to_string(),
        };
        if tokio::time::Instant::now() >= deadline {
            anyhow::bail!("the stores did not answer within {} s: {why}", patience.as_secs());
        }
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
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
