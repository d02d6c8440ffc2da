//! The I/O around `migrations`: applying the migrations a keyspace lacks (what
//! `bloomgate-origin schema apply` and an origin that manages its schema run), and the check an
//! origin that manages none makes of the version a keyspace recorded.

use super::migrations::{self, Migration, Recorded, VersionCheck, SCHEMA_VERSION};
use super::schema::{schema_problems, unversioned_schema_error, ExistingColumn};
use super::{all_rows, CassandraSettings};
use crate::cluster_version::{CLUSTER_VERSION, UNRECORDED};
use crate::store::DatabaseError;
use scylla::client::session::Session;
use scylla::statement::unprepared::Statement;

/// What applying did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SchemaApplied {
    /// The keyspace.
    pub keyspace: String,
    /// Whether the keyspace was created.
    pub created_keyspace: bool,
    /// The migrations applied, oldest first (none: it was up to date).
    pub applied: Vec<(u32, &'static str)>,
    /// The version the keyspace is at now.
    pub version: u32,
    /// The cluster version this apply started the keyspace at (None: one was recorded
    /// already).
    pub started_cluster_at: Option<u32>,
}

impl std::fmt::Display for SchemaApplied {
    /// What `schema apply` prints: a line per migration applied, then where the keyspace is.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.created_keyspace {
            writeln!(f, "created keyspace {}", self.keyspace)?;
        }
        for (version, description) in &self.applied {
            writeln!(f, "applied version {version}: {description}")?;
        }
        if let Some(cluster) = self.started_cluster_at {
            writeln!(f, "started the cluster at version {cluster} (bloomgate-origin upgrade status)")?;
        }
        match self.applied.is_empty() {
            true => write!(f, "keyspace {} is up to date at version {}", self.keyspace, self.version),
            false => write!(f, "keyspace {} is now at version {}", self.keyspace, self.version),
        }
    }
}

/// Brings the keyspace of `settings` to [`SCHEMA_VERSION`]: creates it if missing (with the
/// configured replication, which must then be set), creates the migrations table, and applies
/// each migration it has not recorded, recording each after its statements succeeded and the
/// cluster agreed on them. Refuses a keyspace newer than this build knows.
pub(super) async fn apply(session: &Session, settings: &CassandraSettings) -> Result<SchemaApplied, DatabaseError> {
    let keyspace = settings.keyspace.as_str();
    let created_keyspace = !keyspace_exists(session, keyspace).await?;
    if created_keyspace {
        let replication =
            migrations::replication_for_new_keyspace(keyspace, &settings.replication).map_err(DatabaseError::other)?;
        ddl(session, migrations::keyspace_statement(keyspace, replication)).await?;
    }
    ddl(session, migrations::migrations_table(keyspace)).await?;
    ddl(session, migrations::migrations_table_columns(keyspace)).await?;
    let recorded = recorded_versions(session, settings).await?;
    match VersionCheck::of(&recorded) {
        check @ VersionCheck::Ahead { .. } => {
            return Err(DatabaseError::other(check.refusal(keyspace).unwrap_or_default()))
        }
        VersionCheck::AheadReadable { found, known } => log_ahead_readable(keyspace, found, known),
        _ => {}
    }
    let mut applied = Vec::new();
    for migration in migrations::pending(&recorded) {
        for statement in migration.statements(keyspace) {
            ddl(session, statement).await?;
        }
        record(session, settings, migration).await?;
        tracing::info!(keyspace, version = migration.version, "applied schema migration: {}", migration.description);
        applied.push((migration.version, migration.description));
    }
    // Not recorded (a lightweight transaction needs a quorum of the keyspace's replicas, which
    // a ring still short of nodes cannot give): the keyspace reads as version 1, the safe side,
    // until `upgrade finish` raises it.
    let started_cluster_at = match start_cluster_version(session, settings, created_keyspace).await {
        Ok(started) => started,
        Err(e) => {
            tracing::warn!(keyspace, cause = %e, "the cluster version was not recorded: the keyspace reads as version 1 until `bloomgate-origin upgrade finish`");
            None
        }
    };
    // Past this build's version when a newer release applied migrations it lets this one run on.
    let version = recorded.iter().map(|r| r.version).max().unwrap_or(0).max(SCHEMA_VERSION);
    Ok(SchemaApplied { keyspace: keyspace.to_owned(), created_keyspace, applied, version, started_cluster_at })
}

/// Records the cluster version the keyspace starts at, unless one is recorded: this build's
/// newest if this apply created the keyspace (no older origin ever ran on it: its duties hold
/// from the start, so it counts as raised at the epoch), else the version of the releases
/// before it ([`UNRECORDED`]), which the operator raises with `upgrade finish` once the
/// rollout is done. A lightweight transaction: of two applies at
/// once, the first decides, and the one that found the keyspace existing can only start it
/// lower, which is safe.
async fn start_cluster_version(
    session: &Session,
    settings: &CassandraSettings,
    created_keyspace: bool,
) -> Result<Option<u32>, DatabaseError> {
    let (version, raised_at) = match created_keyspace {
        true => (CLUSTER_VERSION, 0),
        false => (UNRECORDED, crate::clock::now_ms() as i64),
    };
    let mut statement = Statement::new(migrations::start_cluster_version_statement(&settings.keyspace));
    statement.set_serial_consistency(Some(scylla::statement::SerialConsistency::Serial));
    statement.set_consistency(settings.consistency);
    statement.set_request_timeout(Some(settings.timeout));
    let result = session
        .query_unpaged(
            statement,
            (version as i32, crate::cluster_version::RECORD_FORMAT, scylla::value::CqlTimestamp(raised_at)),
        )
        .await
        .map_err(|e| DatabaseError::other(format!("recording the cluster version: {e}")))?;
    Ok(super::applied(result)?.then_some(version))
}

/// The check of an origin that applies no schema (`cassandra_manage_schema = false`): the
/// keyspace's newest recorded version must be [`SCHEMA_VERSION`]. A keyspace that records no
/// versions (made by hand before they were recorded) must have every column bloomgate uses.
pub(super) async fn check(session: &Session, settings: &CassandraSettings) -> Result<(), DatabaseError> {
    let keyspace = settings.keyspace.as_str();
    if table_exists(session, keyspace, "schema_migrations").await? {
        let recorded = recorded_versions(session, settings).await?;
        let check = VersionCheck::of(&recorded);
        if let VersionCheck::AheadReadable { found, known } = check {
            log_ahead_readable(keyspace, found, known);
        }
        return match check.refusal(keyspace) {
            None => Ok(()),
            Some(refusal) => Err(DatabaseError::other(refusal)),
        };
    }
    let result = session
        .query_unpaged(
            "SELECT table_name, column_name, type, kind FROM system_schema.columns WHERE keyspace_name = ?",
            (keyspace,),
        )
        .await
        .map_err(DatabaseError::other)?;
    let columns: Vec<ExistingColumn> = all_rows(result)?;
    let problems = schema_problems(&columns);
    if !problems.is_empty() {
        return Err(DatabaseError::other(unversioned_schema_error(keyspace, &problems)));
    }
    tracing::warn!(
        keyspace,
        "the keyspace has every column bloomgate uses but records no schema version: run `bloomgate-origin schema apply` to record it"
    );
    Ok(())
}

/// Says that this origin runs on a schema newer than it knows, which its newer migrations allow.
fn log_ahead_readable(keyspace: &str, found: u32, known: u32) {
    tracing::info!(
        keyspace,
        found,
        known,
        "the schema is newer than this origin knows; its newer migrations only added what this origin never touches, so it runs on it"
    );
}

/// Runs one schema statement and waits until every node agrees on the schema it made, so the
/// next statement (perhaps coordinated by another node) sees it.
async fn ddl(session: &Session, statement: String) -> Result<(), DatabaseError> {
    session
        .query_unpaged(statement.as_str(), ())
        .await
        .map_err(|e| DatabaseError::other(format!("{statement}: {e}")))?;
    session
        .await_schema_agreement()
        .await
        .map_err(|e| DatabaseError::other(format!("the nodes did not agree on the schema after {statement}: {e}")))?;
    Ok(())
}

/// Records `migration` as applied.
async fn record(session: &Session, settings: &CassandraSettings, migration: &Migration) -> Result<(), DatabaseError> {
    let version = i32::try_from(migration.version).map_err(DatabaseError::other)?;
    let oldest_reader = i32::try_from(migration.oldest_reader).map_err(DatabaseError::other)?;
    let record = versions_statement(migrations::record_statement(&settings.keyspace), settings);
    session
        .query_unpaged(record, (version, migration.description, oldest_reader))
        .await
        .map_err(|e| DatabaseError::other(format!("recording schema version {version}: {e}")))?;
    Ok(())
}

/// The migrations `schema_migrations` records. A table from before `oldest_reader` existed
/// (an origin that applies no schema reading a keyspace not yet migrated) is read without it.
async fn recorded_versions(session: &Session, settings: &CassandraSettings) -> Result<Vec<Recorded>, DatabaseError> {
    let ks = &settings.keyspace;
    let read = |cql: String| async move {
        session
            .query_unpaged(versions_statement(cql, settings), ())
            .await
            .map_err(|e| DatabaseError::other(format!("reading {ks}.schema_migrations: {e}")))
    };
    let rows: Vec<(i32, Option<i32>)> =
        match read(format!("SELECT version, oldest_reader FROM {ks}.schema_migrations")).await {
            Ok(result) => all_rows(result)?,
            Err(_) => {
                let rows: Vec<(i32,)> = all_rows(read(format!("SELECT version FROM {ks}.schema_migrations")).await?)?;
                rows.into_iter().map(|(version,)| (version, None)).collect()
            }
        };
    // A version below 1 is no migration's: it cannot make the keyspace look newer or current.
    Ok(rows
        .into_iter()
        .filter_map(|(version, oldest_reader)| {
            let version = u32::try_from(version).ok()?;
            Some(Recorded { version, oldest_reader: oldest_reader.and_then(|r| u32::try_from(r).ok()) })
        })
        .collect())
}

/// A statement on `schema_migrations`, at ONE with the configured timeout. Versions are only
/// ever added: a read that misses the newest record makes an origin refuse and retry, or
/// `schema apply` apply an idempotent migration again. And a keyspace whose level cannot be
/// served yet (a ring still short of nodes) can still record its schema. (A newer version
/// missed this way is caught where it matters: every definition carries its own format.)
fn versions_statement(cql: String, settings: &CassandraSettings) -> Statement {
    let mut statement = Statement::new(cql);
    statement.set_consistency(scylla::statement::Consistency::One);
    statement.set_request_timeout(Some(settings.timeout));
    statement
}

async fn keyspace_exists(session: &Session, keyspace: &str) -> Result<bool, DatabaseError> {
    let result = session
        .query_unpaged("SELECT keyspace_name FROM system_schema.keyspaces WHERE keyspace_name = ?", (keyspace,))
        .await
        .map_err(DatabaseError::other)?;
    Ok(!all_rows::<(String,)>(result)?.is_empty())
}

async fn table_exists(session: &Session, keyspace: &str, table: &str) -> Result<bool, DatabaseError> {
    let result = session
        .query_unpaged(
            "SELECT table_name FROM system_schema.tables WHERE keyspace_name = ? AND table_name = ?",
            (keyspace, table),
        )
        .await
        .map_err(DatabaseError::other)?;
    Ok(!all_rows::<(String,)>(result)?.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_apply_prints_says_what_it_did_or_that_nothing_was_pending() {
        let mut done = SchemaApplied {
            keyspace: "bg".into(),
            created_keyspace: true,
            applied: migrations::MIGRATIONS.iter().map(|m| (m.version, m.description)).collect(),
            version: SCHEMA_VERSION,
            started_cluster_at: Some(CLUSTER_VERSION),
        };
        let printed = done.to_string();
        assert!(printed.starts_with("created keyspace bg\napplied version 1: tables keys and filters"), "{printed}");
        assert!(printed.contains("\napplied version 2: filters.format"), "{printed}");
        assert!(printed.contains("\napplied version 3: table dropped_filters"), "{printed}");
        assert!(printed.contains("\napplied version 4: tables cluster_version"), "{printed}");
        assert!(printed.contains("\nstarted the cluster at version 2 (bloomgate-origin upgrade status)"), "{printed}");
        assert!(printed.contains("\napplied version 5: tables checkpoints and checkpoint_segments"), "{printed}");
        assert!(printed.ends_with("\nkeyspace bg is now at version 5"), "{printed}");
        done.created_keyspace = false;
        done.applied.clear();
        done.started_cluster_at = None;
        assert_eq!(done.to_string(), "keyspace bg is up to date at version 5");
    }
}
