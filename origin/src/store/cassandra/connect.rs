//! Connecting to Cassandra: the session, the schema created (or, when the operator manages
//! it, checked and the CQL to run printed), and the keyspace's replication checked against the
//! configured consistency, all before the first statement is prepared.

use super::consistency::{check_overlap, Replication};
use super::schema::{create_statements, schema_problems, unmanaged_schema_error, ExistingColumn};
use super::{all_rows, CassandraSettings};
use crate::store::DatabaseError;
use scylla::client::session::Session;
use scylla::client::session_builder::SessionBuilder;
use scylla::statement::Consistency;
use std::time::Duration;

/// A session on the keyspace of `settings`, its schema ready and its replication overlapping
/// the configured consistency.
pub(super) async fn open(settings: &CassandraSettings) -> Result<Session, DatabaseError> {
    let session = SessionBuilder::new()
        .known_nodes(&settings.nodes)
        .connection_timeout(Duration::from_secs(5))
        .build()
        .await
        .map_err(|e| DatabaseError::other(format!("cannot connect to Cassandra at {:?}: {e}", settings.nodes)))?;
    if settings.manage_schema {
        for statement in create_statements(&settings.keyspace, &settings.replication) {
            session.query_unpaged(statement, ()).await.map_err(DatabaseError::other)?;
        }
        session.await_schema_agreement().await.map_err(DatabaseError::other)?;
    } else {
        check_unmanaged_schema(&session, settings).await?;
    }
    check_keyspace_consistency(&session, &settings.keyspace, settings.consistency).await?;
    Ok(session)
}

/// With `cassandra_manage_schema = false`: fails, printing the CQL to run, unless the keyspace
/// and tables exist with the columns bloomgate uses. A missing keyspace simply has no columns.
async fn check_unmanaged_schema(session: &Session, settings: &CassandraSettings) -> Result<(), DatabaseError> {
    let result = session
        .query_unpaged(
            "SELECT table_name, column_name, type, kind FROM system_schema.columns WHERE keyspace_name = ?",
            (&settings.keyspace,),
        )
        .await
        .map_err(DatabaseError::other)?;
    let columns: Vec<ExistingColumn> = all_rows(result)?;
    let problems = schema_problems(&columns);
    if problems.is_empty() {
        Ok(())
    } else {
        Err(DatabaseError::other(unmanaged_schema_error(&settings.keyspace, &settings.replication, &problems)))
    }
}

/// Refuses to run at a consistency level whose reads might miss acknowledged writes for the
/// keyspace's real replication (see `consistency`).
async fn check_keyspace_consistency(
    session: &Session,
    keyspace: &str,
    level: Consistency,
) -> Result<(), DatabaseError> {
    let result = session
        .query_unpaged("SELECT replication FROM system_schema.keyspaces WHERE keyspace_name = ?", (keyspace,))
        .await
        .map_err(DatabaseError::other)?;
    let rows = result.into_rows_result().map_err(DatabaseError::other)?;
    let row: Option<(std::collections::HashMap<String, String>,)> =
        rows.maybe_first_row().map_err(DatabaseError::other)?;
    let (map,) = row.ok_or_else(|| DatabaseError::other(format!("keyspace {keyspace} not found after creating it")))?;
    let replication =
        Replication::from_schema(&map).map_err(|e| DatabaseError::other(format!("keyspace {keyspace}: {e}")))?;
    check_overlap(level, &replication).map_err(|e| DatabaseError::other(format!("keyspace {keyspace}: {e}")))
}
