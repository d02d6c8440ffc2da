//! Connecting to Cassandra: the session, the schema brought to this build's version (or, when
//! the operator applies it, its version checked), and the keyspace's replication checked
//! against the configured consistency, all before the first statement is prepared.

use super::consistency::{check_overlap, Replication};
use super::migrate;
use super::CassandraSettings;
use crate::store::DatabaseError;
use scylla::client::session::Session;
use scylla::client::session_builder::SessionBuilder;
use scylla::statement::Consistency;
use std::time::Duration;

/// A session on the keyspace of `settings`, its schema ready and its replication overlapping
/// the configured consistency.
pub(super) async fn open(settings: &CassandraSettings) -> Result<Session, DatabaseError> {
    let session = session(settings).await?;
    if settings.manage_schema {
        migrate::apply(&session, settings).await?;
    } else {
        migrate::check(&session, settings).await?;
    }
    check_keyspace_consistency(&session, &settings.keyspace, settings.consistency).await?;
    Ok(session)
}

/// A session on the cluster of `settings`, authenticated and over TLS as configured, on a
/// release bloomgate supports; nothing of the keyspace checked yet.
pub(super) async fn session(settings: &CassandraSettings) -> Result<Session, DatabaseError> {
    let mut builder = SessionBuilder::new().known_nodes(&settings.nodes).connection_timeout(Duration::from_secs(5));
    if let Some((user, password)) = &settings.access.credentials {
        builder = builder.user(user, password);
    }
    builder = builder.tls_context(settings.access.tls.clone());
    let session = builder.build().await.map_err(|e| {
        let hint = connect_hint(&e.to_string(), &settings.access);
        DatabaseError::other(format!("cannot connect to Cassandra at {}: {e}{hint}", settings.nodes.join(",")))
    })?;
    check_release(&session).await?;
    Ok(session)
}

/// The oldest Cassandra release bloomgate runs on: its schema has a storage-attached index
/// (SAI, new in 5.0), which rebuilds and drops read a filter's keys through.
const OLDEST_RELEASE: (u32, u32) = (5, 0);

/// Refuses a cluster older than [`OLDEST_RELEASE`], naming its release and why.
async fn check_release(session: &Session) -> Result<(), DatabaseError> {
    let result =
        session.query_unpaged("SELECT release_version FROM system.local", ()).await.map_err(DatabaseError::other)?;
    let rows = result.into_rows_result().map_err(DatabaseError::other)?;
    let (release,): (String,) = rows.first_row().map_err(DatabaseError::other)?;
    supported_release(&release).map_err(DatabaseError::other)
}

/// Whether `release` (`system.local`'s `release_version`, e.g. `5.0.8`) is one bloomgate runs on.
fn supported_release(release: &str) -> Result<(), String> {
    let mut parts = release.split(['.', '-']).map(|p| p.parse::<u32>());
    let (Some(Ok(major)), Some(Ok(minor))) = (parts.next(), parts.next()) else {
        return Err(format!("cannot read Cassandra's release {release:?}"));
    };
    match (major, minor) >= OLDEST_RELEASE {
        true => Ok(()),
        false => Err(format!(
            "Cassandra {release} is not supported: bloomgate needs {}.{} or later (its schema has a storage-attached index, new in 5.0); upgrade the cluster",
            OLDEST_RELEASE.0, OLDEST_RELEASE.1
        )),
    }
}

/// What to check, for the failures whose driver message does not say: a plaintext connection
/// to a node that wants TLS reads as a broken connection, and one that wants a password as an
/// authentication request nobody answers.
fn connect_hint(message: &str, access: &super::CassandraAccess) -> &'static str {
    let lower = message.to_ascii_lowercase();
    if lower.contains("authenticat") && access.credentials.is_none() {
        " (the cluster asks for a password: set cassandra_user and cassandra_password or cassandra_password_file)"
    } else if lower.contains("authenticat") {
        " (check cassandra_user and cassandra_password or cassandra_password_file)"
    } else if access.tls.is_none()
        && ["broken", "reset", "unexpected end", "eof", "timed out", "timeout"].iter().any(|w| lower.contains(w))
    {
        " (if the cluster requires TLS, set cassandra_tls = true)"
    } else if lower.contains("certificate") || lower.contains("unknownissuer") {
        " (check cassandra_tls_ca_file: it must hold the CA that signed the nodes' certificates; and cassandra_tls_server_name if the certificates do not name the nodes' IP addresses)"
    } else {
        ""
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

#[cfg(test)]
mod tests {
    use super::supported_release;

    #[test]
    fn releases_before_5_0_are_refused_with_the_reason() {
        for ok in ["5.0.0", "5.0.8", "5.1", "6.0-beta1"] {
            assert!(supported_release(ok).is_ok(), "{ok}");
        }
        let err = supported_release("4.1.5").unwrap_err();
        assert!(err.contains("4.1.5") && err.contains("5.0 or later") && err.contains("storage-attached"), "{err}");
        assert!(supported_release("3.11.16").is_err());
        assert!(supported_release("banana").unwrap_err().contains("cannot read"));
    }
}
