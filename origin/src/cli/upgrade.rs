//! `upgrade status` and `upgrade finish`: the cluster version (see `cluster_version`) read,
//! with the origins that report themselves running; and raised to this release's once every
//! running origin knows it. Connected to Cassandra as `serve` is, applying no schema: run
//! `schema apply` first.

use super::serve::ServeArgs;
use bloomgate_origin::cluster_version::{self, ClusterVersion, Finish, LiveOrigin, CLUSTER_VERSION, VERSIONS};
use bloomgate_origin::gate::cluster::finish_upgrade;
use bloomgate_origin::store::cassandra::CassandraDatabase;
use bloomgate_origin::store::Database;
use clap::Subcommand;
use std::io::Write;

/// The upgrade commands.
#[derive(Subcommand)]
pub enum UpgradeCommand {
    /// Print the cluster version, what this release knows, and the origins that report
    /// themselves running with the newest version each knows.
    Status(Box<ServeArgs>),
    /// Raise the cluster version to this release's, once every running origin knows it. Run
    /// it when the rollout is done (origins of releases before the cluster version do not
    /// report: give --origins to have their absence noticed). Idempotent.
    Finish(Box<FinishArgs>),
}

/// `upgrade finish`'s arguments.
#[derive(clap::Args)]
pub struct FinishArgs {
    /// How many origins run (e.g. the Deployment's replicas): refuse unless at least this many
    /// report themselves running.
    #[arg(long)]
    origins: Option<usize>,
    /// The settings, as `serve` reads them.
    #[command(flatten)]
    serve: ServeArgs,
}

impl UpgradeCommand {
    /// The command's name, for its messages.
    pub fn name(&self) -> &'static str {
        match self {
            UpgradeCommand::Status(_) => "upgrade status",
            UpgradeCommand::Finish(_) => "upgrade finish",
        }
    }
}

/// Runs an upgrade command, writing its output to `out`.
pub async fn run(command: UpgradeCommand, out: &mut impl Write) -> anyhow::Result<()> {
    match command {
        UpgradeCommand::Status(args) => {
            let database = connect(*args).await?;
            let (version, reports) = read(&database).await?;
            write_status(out, version, &reports, bloomgate_origin::clock::now_ms())
        }
        UpgradeCommand::Finish(args) => {
            let FinishArgs { origins, serve } = *args;
            let database = connect(serve).await?;
            match finish_upgrade(&database, origins).await? {
                Finish::AlreadyCurrent(v) => writeln!(out, "the cluster is at version {v} already: nothing to do")?,
                Finish::Raise { from, to } => {
                    writeln!(out, "raised the cluster from version {from} to {to}: {}", describe(to))?
                }
            }
            Ok(())
        }
    }
}

async fn connect(args: ServeArgs) -> anyhow::Result<CassandraDatabase> {
    let config = args.into_config()?;
    if !config.database_is_shared() {
        anyhow::bail!(
            "cassandra_nodes (BLOOMGATE_CASSANDRA_NODES) is not set: without it the keys live in one origin's embedded key file, which has no cluster to upgrade"
        );
    }
    config.validate_cassandra()?;
    let mut settings = bloomgate_origin::cassandra_settings(&config)?;
    // A command that reads and raises a version applies no schema: `schema apply` does.
    settings.manage_schema = false;
    Ok(CassandraDatabase::connect(&settings).await?)
}

async fn read(database: &CassandraDatabase) -> anyhow::Result<(ClusterVersion, Vec<LiveOrigin>)> {
    Ok((database.cluster_version().await?, database.origin_reports().await?))
}

fn describe(version: u32) -> &'static str {
    VERSIONS.iter().find(|(v, _)| *v == version).map_or("a version this release does not know", |(_, what)| what)
}

/// What `upgrade status` prints.
fn write_status(
    out: &mut impl Write,
    version: ClusterVersion,
    reports: &[LiveOrigin],
    now_ms: u64,
) -> anyhow::Result<()> {
    writeln!(out, "cluster version: {} ({})", version.version, describe(version.version))?;
    writeln!(out, "this release knows up to: {CLUSTER_VERSION}")?;
    let live: Vec<&LiveOrigin> = reports.iter().filter(|r| r.is_live(now_ms)).collect();
    writeln!(out, "origins reporting: {}", live.len())?;
    for origin in &live {
        let age_s = now_ms.saturating_sub(origin.reported_at_ms) / 1000;
        writeln!(
            out,
            "  {}  release {}  knows {}  reported {age_s} s ago",
            origin.origin, origin.release, origin.knows
        )?;
    }
    let next = match cluster_version::finish(version.version, reports, now_ms, None) {
        Ok(Finish::AlreadyCurrent(_)) => "nothing: the cluster is at this release's version".to_owned(),
        Ok(Finish::Raise { to, .. }) => {
            format!("`bloomgate-origin upgrade finish` raises it to {to} once the rollout is done")
        }
        Err(refused) => refused.to_string(),
    };
    writeln!(out, "next: {next}")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_names_the_version_the_origins_and_what_to_do_next() {
        let now = 100_000;
        let reports = [
            LiveOrigin { origin: "pod-a/7/1".into(), release: "0.2.0".into(), knows: 2, reported_at_ms: now - 3_000 },
            LiveOrigin { origin: "gone/1/1".into(), release: "0.2.0".into(), knows: 1, reported_at_ms: 0 },
        ];
        let mut out = Vec::new();
        write_status(&mut out, ClusterVersion { version: 1, raised_at_ms: 0 }, &reports, now).unwrap();
        let printed = String::from_utf8(out).unwrap();
        assert!(printed.starts_with("cluster version: 1 (a write stores the key's row alone"), "{printed}");
        assert!(
            printed.contains("origins reporting: 1\n  pod-a/7/1  release 0.2.0  knows 2  reported 3 s ago\n"),
            "{printed}"
        );
        assert!(!printed.contains("gone/1/1"), "an expired report is no running origin: {printed}");
        assert!(printed.contains("next: `bloomgate-origin upgrade finish` raises it to 2"), "{printed}");
    }
}
