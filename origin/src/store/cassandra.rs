//! The source of truth in Cassandra: keys by (filter, key), and filter definitions.
//!
//! Every statement is prepared once at start-up with its consistency, timeout and idempotence;
//! each lookup is a single-partition read bound on the full partition key.

use super::{FilterDef, KeyStore, KeyStoreError};
use bloomgate_filter::KeyFormat;
use futures::future::BoxFuture;
use futures::FutureExt;
use scylla::client::session::Session;
use scylla::client::session_builder::SessionBuilder;
use scylla::errors::{ExecutionError, RequestAttemptError};
use scylla::statement::prepared::PreparedStatement;
use scylla::statement::Consistency;
use std::sync::Arc;
use std::time::Duration;
use tracing::instrument;

/// Connection and schema settings.
#[derive(Clone, Debug)]
pub struct CassandraSettings {
    /// Contact points, `host:port`.
    pub nodes: Vec<String>,
    /// Keyspace, created if missing.
    pub keyspace: String,
    /// Replication clause for a new keyspace, e.g.
    /// `{'class': 'SimpleStrategy', 'replication_factor': 1}`.
    pub replication: String,
    /// Consistency for reads and writes.
    pub consistency: Consistency,
    /// Per-request timeout.
    pub timeout: Duration,
}

/// Cassandra as the key store.
pub struct CassandraKeyStore {
    session: Arc<Session>,
    get_key: PreparedStatement,
    put_key: PreparedStatement,
    delete_key: PreparedStatement,
    insert_filter: PreparedStatement,
    get_filter: PreparedStatement,
    ping: PreparedStatement,
}

fn err(e: impl std::fmt::Display) -> KeyStoreError {
    KeyStoreError::Error(e.to_string())
}

fn classify(e: ExecutionError) -> KeyStoreError {
    match e {
        ExecutionError::RequestTimeout(_) => KeyStoreError::Timeout,
        ExecutionError::LastAttemptError(RequestAttemptError::DbError(
            scylla::errors::DbError::ReadTimeout { .. },
            _,
        ))
        | ExecutionError::LastAttemptError(RequestAttemptError::DbError(
            scylla::errors::DbError::WriteTimeout { .. },
            _,
        )) => KeyStoreError::Timeout,
        other => err(other),
    }
}

impl CassandraKeyStore {
    /// Connects, creates the keyspace and tables if missing, and prepares every statement.
    pub async fn connect(settings: &CassandraSettings) -> Result<CassandraKeyStore, KeyStoreError> {
        let session = SessionBuilder::new()
            .known_nodes(&settings.nodes)
            .connection_timeout(Duration::from_secs(5))
            .build()
            .await
            .map_err(|e| {
                err(format!(
                    "cannot connect to Cassandra at {:?}: {e}",
                    settings.nodes
                ))
            })?;
        let ks = &settings.keyspace;
        let ddl = [
            format!("CREATE KEYSPACE IF NOT EXISTS {ks} WITH replication = {}", settings.replication),
            format!(
                "CREATE TABLE IF NOT EXISTS {ks}.keys (filter text, key blob, value blob, PRIMARY KEY ((filter, key)))"
            ),
            format!(
                "CREATE TABLE IF NOT EXISTS {ks}.filters (name text PRIMARY KEY, key_format text, capacity bigint, fp_rate double, segment_bytes bigint)"
            ),
        ];
        for statement in ddl {
            session.query_unpaged(statement, ()).await.map_err(err)?;
        }
        session.await_schema_agreement().await.map_err(err)?;
        let prepare = |cql: String, idempotent: bool| {
            let session = &session;
            async move {
                let mut p = session.prepare(cql).await.map_err(err)?;
                p.set_consistency(settings.consistency);
                p.set_request_timeout(Some(settings.timeout));
                p.set_is_idempotent(idempotent);
                Ok::<_, KeyStoreError>(p)
            }
        };
        let get_key = prepare(
            format!("SELECT value FROM {ks}.keys WHERE filter = ? AND key = ?"),
            true,
        )
        .await?;
        let put_key = prepare(
            format!("INSERT INTO {ks}.keys (filter, key, value) VALUES (?, ?, ?)"),
            true,
        )
        .await?;
        let delete_key = prepare(
            format!("DELETE FROM {ks}.keys WHERE filter = ? AND key = ? IF EXISTS"),
            false,
        )
        .await?;
        let mut insert_filter = prepare(
            format!(
                "INSERT INTO {ks}.filters (name, key_format, capacity, fp_rate, segment_bytes) VALUES (?, ?, ?, ?, ?) IF NOT EXISTS"
            ),
            false,
        )
        .await?;
        // Lightweight transactions need a serial consistency; SERIAL works on one node and many.
        insert_filter.set_serial_consistency(Some(scylla::statement::SerialConsistency::Serial));
        let get_filter = prepare(
            format!("SELECT name, key_format, capacity, fp_rate, segment_bytes FROM {ks}.filters WHERE name = ?"),
            true,
        )
        .await?;
        let mut ping =
            prepare("SELECT release_version FROM system.local".to_string(), true).await?;
        ping.set_consistency(Consistency::One);
        Ok(CassandraKeyStore {
            session: Arc::new(session),
            get_key,
            put_key,
            delete_key,
            insert_filter,
            get_filter,
            ping,
        })
    }

    /// The driver session, for scans that live outside this trait (rebuilds).
    pub fn session(&self) -> &Arc<Session> {
        &self.session
    }
}

type FilterRow = (String, String, i64, f64, i64);

fn def_from_row(
    (name, key_format, capacity, fp_rate, segment_bytes): FilterRow,
) -> Result<FilterDef, KeyStoreError> {
    Ok(FilterDef {
        name,
        key_format: key_format.parse::<KeyFormat>().map_err(err)?,
        capacity: u64::try_from(capacity).map_err(err)?,
        fp_rate,
        segment_bytes: u64::try_from(segment_bytes).map_err(err)?,
    })
}

impl KeyStore for CassandraKeyStore {
    #[instrument(skip_all, fields(filter))]
    fn get(
        &self,
        filter: &str,
        key: &[u8],
    ) -> BoxFuture<'_, Result<Option<Vec<u8>>, KeyStoreError>> {
        let values = (filter.to_owned(), key.to_vec());
        async move {
            let result = self
                .session
                .execute_unpaged(&self.get_key, values)
                .await
                .map_err(classify)?;
            let rows = result.into_rows_result().map_err(err)?;
            let row: Option<(Option<Vec<u8>>,)> = rows.maybe_first_row().map_err(err)?;
            Ok(row.map(|(value,)| value.unwrap_or_default()))
        }
        .boxed()
    }

    fn put(
        &self,
        filter: &str,
        key: &[u8],
        value: &[u8],
    ) -> BoxFuture<'_, Result<(), KeyStoreError>> {
        let values = (filter.to_owned(), key.to_vec(), value.to_vec());
        async move {
            self.session
                .execute_unpaged(&self.put_key, values)
                .await
                .map_err(classify)?;
            Ok(())
        }
        .boxed()
    }

    fn delete(&self, filter: &str, key: &[u8]) -> BoxFuture<'_, Result<bool, KeyStoreError>> {
        let values = (filter.to_owned(), key.to_vec());
        async move {
            let result = self
                .session
                .execute_unpaged(&self.delete_key, values)
                .await
                .map_err(classify)?;
            let rows = result.into_rows_result().map_err(err)?;
            let applied: Option<(bool,)> = rows.maybe_first_row().map_err(err)?;
            Ok(applied.is_some_and(|(applied,)| applied))
        }
        .boxed()
    }

    fn create_filter(
        &self,
        def: &FilterDef,
    ) -> BoxFuture<'_, Result<(FilterDef, bool), KeyStoreError>> {
        let def = def.clone();
        async move {
            let values = (
                def.name.clone(),
                def.key_format.to_string(),
                i64::try_from(def.capacity).map_err(err)?,
                def.fp_rate,
                i64::try_from(def.segment_bytes).map_err(err)?,
            );
            let result = self
                .session
                .execute_unpaged(&self.insert_filter, values)
                .await
                .map_err(classify)?;
            // The first column of an LWT's result is `[applied]`.
            let rows = result.into_rows_result().map_err(err)?;
            let first: Option<scylla::value::Row> = rows.maybe_first_row().map_err(err)?;
            let applied = matches!(
                first.as_ref().and_then(|row| row.columns.first()),
                Some(Some(scylla::value::CqlValue::Boolean(true)))
            );
            // Whether we inserted or someone else did first, the stored row is the answer.
            let stored = self
                .filter(&def.name)
                .await?
                .ok_or_else(|| err("filter definition vanished after insert"))?;
            Ok((stored, applied))
        }
        .boxed()
    }

    fn filter(&self, name: &str) -> BoxFuture<'_, Result<Option<FilterDef>, KeyStoreError>> {
        let values = (name.to_owned(),);
        async move {
            let result = self
                .session
                .execute_unpaged(&self.get_filter, values)
                .await
                .map_err(classify)?;
            let rows = result.into_rows_result().map_err(err)?;
            let row: Option<FilterRow> = rows.maybe_first_row().map_err(err)?;
            row.map(def_from_row).transpose()
        }
        .boxed()
    }

    fn ping(&self) -> BoxFuture<'_, Result<(), KeyStoreError>> {
        async move {
            self.session
                .execute_unpaged(&self.ping, ())
                .await
                .map_err(classify)?;
            Ok(())
        }
        .boxed()
    }
}
