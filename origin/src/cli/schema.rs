//! `schema print` and `schema apply`: the Cassandra schema's migrations written out for cqlsh,
//! or applied to the keyspace, with the settings `serve` reads (file, environment, flags), so
//! a Job or an operator applies exactly what the origins will check.

use super::serve::ServeArgs;
use bloomgate_origin::store::cassandra::{migrations, CassandraDatabase};
use bloomgate_origin::store::DatabaseError;
use clap::Subcommand;
use std::io::Write;

/// The schema commands.
#[derive(Subcommand)]
pub enum SchemaCommand {
    /// Print the whole CQL script: the keyspace (with cassandra_replication), the migrations
    /// table, every migration and the rows recording them. Every statement is a no-op where
    /// its object exists; run it with `cqlsh -f`. Connects to nothing.
    Print(Box<ServeArgs>),
    /// Apply the migrations the keyspace lacks (creating it with cassandra_replication if it
    /// does not exist), connected as `serve` is, and print what was done.
    Apply(Box<ServeArgs>),
}

impl SchemaCommand {
    /// The command's name, for its messages.
    pub fn name(&self) -> &'static str {
        match self {
            SchemaCommand::Print(_) => "schema print",
            SchemaCommand::Apply(_) => "schema apply",
        }
    }
}

/// Runs a schema command, writing its output to `out`.
pub async fn run(command: SchemaCommand, out: &mut impl Write) -> anyhow::Result<()> {
    match command {
        SchemaCommand::Print(args) => print(*args, out),
        SchemaCommand::Apply(args) => apply(*args, out).await,
    }
}

/// `schema print`.
fn print(args: ServeArgs, out: &mut impl Write) -> anyhow::Result<()> {
    let config = args.into_config()?;
    let script =
        migrations::script(&config.cassandra_keyspace, &config.cassandra_replication).map_err(anyhow::Error::msg)?;
    out.write_all(script.as_bytes())?;
    Ok(())
}

/// `schema apply`.
async fn apply(args: ServeArgs, out: &mut impl Write) -> anyhow::Result<()> {
    let config = args.into_config()?;
    if !config.database_is_shared() {
        anyhow::bail!(
            "cassandra_nodes (BLOOMGATE_CASSANDRA_NODES) is not set: there is no Cassandra to apply the schema to (without it the keys live in the embedded key file, which needs none)"
        );
    }
    config.validate_cassandra()?;
    let settings = bloomgate_origin::cassandra_settings(&config)?;
    let done = CassandraDatabase::apply_schema(&settings).await.map_err(|e| match e {
        // The message alone: "database error:" would only repeat what the command is about.
        DatabaseError::Error(message) => anyhow::Error::msg(message),
        e => e.into(),
    })?;
    writeln!(out, "{done}")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::{Cli, Command};
    use super::*;
    use clap::Parser;

    fn schema(args: &[&str]) -> SchemaCommand {
        match Cli::try_parse_from([&["bloomgate-origin", "schema"], args].concat()).unwrap().command {
            Command::Schema(command) => command,
            _ => unreachable!(),
        }
    }

    #[tokio::test]
    async fn print_writes_the_script_for_the_configured_keyspace_and_replication() {
        let replication = "{'class': 'NetworkTopologyStrategy', 'dc1': 3}";
        let mut out = Vec::new();
        let print = schema(&["print", "--cassandra-keyspace", "bg_ops", "--cassandra-replication", replication]);
        assert_eq!(print.name(), "schema print");
        run(print, &mut out).await.unwrap();
        let printed = String::from_utf8(out).unwrap();
        assert_eq!(printed, migrations::script("bg_ops", replication).unwrap());
        assert!(printed.contains(&format!("CREATE KEYSPACE IF NOT EXISTS bg_ops WITH replication = {replication};")));
    }

    #[tokio::test]
    async fn print_without_a_replication_and_apply_without_cassandra_say_what_to_set() {
        let err = run(schema(&["print"]), &mut Vec::new()).await.unwrap_err().to_string();
        assert!(err.contains("cassandra_replication") && err.contains("NetworkTopologyStrategy"), "{err}");
        let err = run(schema(&["apply"]), &mut Vec::new()).await.unwrap_err().to_string();
        assert!(err.contains("cassandra_nodes (BLOOMGATE_CASSANDRA_NODES) is not set"), "{err}");
        let contradictory = schema(&["apply", "--cassandra-nodes", "127.0.0.1:1", "--cassandra-user", "bg"]);
        let err = run(contradictory, &mut Vec::new()).await.unwrap_err().to_string();
        assert!(err.contains("cassandra_user is set without a password"), "refused before connecting: {err}");
    }
}
