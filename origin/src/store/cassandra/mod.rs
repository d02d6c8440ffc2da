//! The source of truth in Cassandra: keys by (filter, key), and filter definitions.
//!
//! Every statement is prepared once at start-up with its consistency, timeout and idempotence;
//! each lookup is a single-partition read bound on the full partition key.
//!
//! One consistency level for everything that reads or writes keys and definitions: lookups,
//! writes, deletes, definitions and the rebuild's scan all run at the configured
//! `cassandra_consistency` (LOCAL_QUORUM by default), because a scan at a weaker level could
//! miss an acknowledged key on a ring with a node down, and the rebuilt filter would then say
//! "no" for it. Only the health ping reads at ONE: it reads `system.local`, a table of the
//! coordinator itself, and asks whether that node answers, not whether replicas agree.
//!
//! A rebuild reads only its own filter's keys: each token range is queried with `filter = ?`
//! through the storage-attached index `keys_by_filter`, so its cost follows the filter's size,
//! not the table's. An index read at the configured level meets the writes as the rows do
//! (each replica indexes a row as it stores it). Without the index (a schema managed
//! elsewhere), or while it is still being built, a range is read whole and filtered here.

pub mod consistency;
mod drop;
pub mod schema;

use super::{Database, DatabaseError, FilterDef};
use async_trait::async_trait;
use bloomgate_filter::KeyFormat;
use consistency::{check_overlap, Replication};
use schema::{create_statements, schema_problems, unmanaged_schema_error, ExistingColumn, FILTER_INDEX};
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
    /// Keyspace, created if missing when `manage_schema`.
    pub keyspace: String,
    /// Replication clause for a new keyspace, e.g.
    /// `{'class': 'SimpleStrategy', 'replication_factor': 1}`.
    pub replication: String,
    /// Create the keyspace and tables if missing; `false` = only check that they exist.
    pub manage_schema: bool,
    /// Consistency for reads and writes.
    pub consistency: Consistency,
    /// Per-request timeout.
    pub timeout: Duration,
}

/// Cassandra as the database.
pub struct CassandraDatabase {
    session: Arc<Session>,
    get_key: PreparedStatement,
    put_key: PreparedStatement,
    delete_key: PreparedStatement,
    insert_filter: PreparedStatement,
    get_filter: PreparedStatement,
    all_filters: PreparedStatement,
    resize: PreparedStatement,
    scan_range: PreparedStatement,
    /// The scan of one filter's keys in a token range, through the filter index (if it exists).
    scan_filter_range: Option<PreparedStatement>,
    /// One key of a filter, through the filter index (if it exists).
    any_key: Option<PreparedStatement>,
    drop_filter: PreparedStatement,
    ping: PreparedStatement,
}

/// Token ranges a full scan is cut into: enough for parallelism and resumable progress on a
/// cluster, each a bounded, paged query.
const SCAN_RANGES: i64 = 64;
/// Rows per page of a scan.
const SCAN_PAGE: i32 = 5000;
/// Attempts per token range of a scan. A page can time out while a replica has died and the
/// ring has not yet marked it down (seen on the 3-node ring, `tests/tests/cassandra_ring.rs`:
/// pages 10 s after a `kill -9` timed out, where single-key reads carried on); a later attempt
/// reads from live replicas. Scanning a range again is harmless: the sink only sets bits.
const SCAN_ATTEMPTS: u32 = 3;
/// Pause before scanning a failed range again.
const SCAN_RETRY_PAUSE: Duration = Duration::from_secs(1);

fn err(e: impl std::fmt::Display) -> DatabaseError {
    DatabaseError::Error(e.to_string())
}

fn classify(e: ExecutionError) -> DatabaseError {
    match e {
        ExecutionError::RequestTimeout(_) => DatabaseError::Timeout,
        ExecutionError::LastAttemptError(RequestAttemptError::DbError(
            scylla::errors::DbError::ReadTimeout { .. },
            _,
        ))
        | ExecutionError::LastAttemptError(RequestAttemptError::DbError(
            scylla::errors::DbError::WriteTimeout { .. },
            _,
        )) => DatabaseError::Timeout,
        other => err(other),
    }
}

impl CassandraDatabase {
    /// Connects, creates the keyspace and tables if missing (or, when the operator manages the
    /// schema, checks that they exist), and prepares every statement.
    pub async fn connect(settings: &CassandraSettings) -> Result<CassandraDatabase, DatabaseError> {
        let session = SessionBuilder::new()
            .known_nodes(&settings.nodes)
            .connection_timeout(Duration::from_secs(5))
            .build()
            .await
            .map_err(|e| err(format!("cannot connect to Cassandra at {:?}: {e}", settings.nodes)))?;
        let ks = &settings.keyspace;
        if settings.manage_schema {
            for statement in create_statements(ks, &settings.replication) {
                session.query_unpaged(statement, ()).await.map_err(err)?;
            }
            session.await_schema_agreement().await.map_err(err)?;
        } else {
            check_unmanaged_schema(&session, settings).await?;
        }
        check_keyspace_consistency(&session, ks, settings.consistency).await?;
        let prepare = |cql: String, idempotent: bool| {
            let session = &session;
            async move {
                let mut p = session.prepare(cql).await.map_err(err)?;
                p.set_consistency(settings.consistency);
                p.set_request_timeout(Some(settings.timeout));
                p.set_is_idempotent(idempotent);
                Ok::<_, DatabaseError>(p)
            }
        };
        let get_key = prepare(format!("SELECT value FROM {ks}.keys WHERE filter = ? AND key = ?"), true).await?;
        let put_key = prepare(format!("INSERT INTO {ks}.keys (filter, key, value) VALUES (?, ?, ?)"), true).await?;
        // A plain delete, like the plain insert: a lightweight-transaction delete mixed with
        // plain inserts on the same rows orders them by two different clocks (Paxos ballots
        // and write timestamps), and could shadow an insert acknowledged after it.
        let delete_key = prepare(format!("DELETE FROM {ks}.keys WHERE filter = ? AND key = ?"), true).await?;
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
        let all_filters =
            prepare(format!("SELECT name, key_format, capacity, fp_rate, segment_bytes FROM {ks}.filters"), true)
                .await?;
        // Definitions are written only by lightweight transactions (create, resize), never mixed.
        let mut resize =
            prepare(format!("UPDATE {ks}.filters SET capacity = ?, fp_rate = ? WHERE name = ? IF EXISTS"), false)
                .await?;
        resize.set_serial_consistency(Some(scylla::statement::SerialConsistency::Serial));
        // Prepared like the rest, so every page of the scan runs at the configured level
        // (LOCAL_QUORUM by default), never the driver's default: see the module doc. A rebuild
        // may take minutes: each page gets a generous timeout, not the lookup one.
        let scan_timeout = Some(settings.timeout.max(Duration::from_secs(10)));
        let mut scan_range = prepare(
            format!("SELECT filter, key FROM {ks}.keys WHERE token(filter, key) >= ? AND token(filter, key) <= ?"),
            true,
        )
        .await?;
        scan_range.set_page_size(SCAN_PAGE);
        scan_range.set_request_timeout(scan_timeout);
        // Only the filter's own keys, through the index on `filter`; without the index (a
        // schema managed elsewhere that lacks it) the statement does not prepare, and rebuilds
        // read the whole table.
        let scan_filter_range = match prepare(
            format!(
                "SELECT filter, key FROM {ks}.keys WHERE filter = ? AND token(filter, key) >= ? AND token(filter, key) <= ?"
            ),
            true,
        )
        .await
        {
            Ok(mut scan) => {
                scan.set_page_size(SCAN_PAGE);
                scan.set_request_timeout(scan_timeout);
                Some(scan)
            }
            Err(e) => {
                tracing::warn!(
                    cause = %e,
                    "no index {FILTER_INDEX} on {ks}.keys: rebuilds read the whole table; create it with: {}",
                    create_statements(ks, &settings.replication)[3]
                );
                None
            }
        };
        // Through the index, like the scan above: without it, the statement does not prepare.
        let any_key = prepare(format!("SELECT key FROM {ks}.keys WHERE filter = ? LIMIT 1"), true).await.ok();
        let mut drop_filter = prepare(format!("DELETE FROM {ks}.filters WHERE name = ? IF EXISTS"), false).await?;
        drop_filter.set_serial_consistency(Some(scylla::statement::SerialConsistency::Serial));
        let mut ping = prepare("SELECT release_version FROM system.local".to_string(), true).await?;
        // The one exception to the configured level (see the module doc): a node-local table.
        ping.set_consistency(Consistency::One);
        Ok(CassandraDatabase {
            session: Arc::new(session),
            get_key,
            put_key,
            delete_key,
            insert_filter,
            get_filter,
            all_filters,
            resize,
            scan_range,
            scan_filter_range,
            any_key,
            drop_filter,
            ping,
        })
    }

    /// Sends the keys of `filter` in one token range to `sink`; returns how many. Through the
    /// filter index when there is one; if that query fails (an index still being built on
    /// existing rows refuses queries), by reading the range whole. A key sent twice (a range
    /// read again after a failure part-way) sets the same bits again.
    async fn scan_range_once(
        &self,
        filter: &str,
        start: i64,
        end: i64,
        sink: &(dyn Fn(&[u8]) + Send + Sync),
    ) -> Result<u64, DatabaseError> {
        if let Some(indexed) = &self.scan_filter_range {
            match self.scan_rows(indexed, (filter, start, end), filter, sink).await {
                Ok(n) => return Ok(n),
                Err(e) => {
                    tracing::warn!(filter, start, end, cause = %e, "scan through the filter index failed; reading the range whole")
                }
            }
        }
        self.scan_rows(&self.scan_range, (start, end), filter, sink).await
    }

    /// Runs a scan whose rows are `(filter, key)`, sending the keys of `filter` to `sink`.
    async fn scan_rows(
        &self,
        scan: &PreparedStatement,
        values: impl scylla::serialize::row::SerializeRow,
        filter: &str,
        sink: &(dyn Fn(&[u8]) + Send + Sync),
    ) -> Result<u64, DatabaseError> {
        use futures::TryStreamExt;
        let mut rows = self
            .session
            .execute_iter(scan.clone(), values)
            .await
            .map_err(err)?
            .rows_stream::<(String, Vec<u8>)>()
            .map_err(err)?;
        let mut n = 0u64;
        while let Some((row_filter, key)) = rows.try_next().await.map_err(err)? {
            if row_filter == filter {
                sink(&key);
                n += 1;
            }
        }
        Ok(n)
    }

    /// Whether a rebuild's scan reads only its filter's keys (the filter index exists).
    pub fn scans_by_index(&self) -> bool {
        self.scan_filter_range.is_some()
    }

    /// The driver session, for scans that live outside this trait (rebuilds).
    pub fn session(&self) -> &Arc<Session> {
        &self.session
    }
}

type FilterRow = (String, String, i64, f64, i64);

fn def_from_row((name, key_format, capacity, fp_rate, segment_bytes): FilterRow) -> Result<FilterDef, DatabaseError> {
    Ok(FilterDef {
        name,
        key_format: key_format.parse::<KeyFormat>().map_err(err)?,
        capacity: u64::try_from(capacity).map_err(err)?,
        fp_rate,
        segment_bytes: u64::try_from(segment_bytes).map_err(err)?,
    })
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
        .map_err(err)?;
    let rows = result.into_rows_result().map_err(err)?;
    let columns: Vec<ExistingColumn> =
        rows.rows::<ExistingColumn>().map_err(err)?.collect::<Result<_, _>>().map_err(err)?;
    let problems = schema_problems(&columns);
    if problems.is_empty() {
        Ok(())
    } else {
        Err(err(unmanaged_schema_error(&settings.keyspace, &settings.replication, &problems)))
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
        .map_err(err)?;
    let rows = result.into_rows_result().map_err(err)?;
    let row: Option<(std::collections::HashMap<String, String>,)> = rows.maybe_first_row().map_err(err)?;
    let (map,) = row.ok_or_else(|| err(format!("keyspace {keyspace} not found after creating it")))?;
    let replication = Replication::from_schema(&map).map_err(|e| err(format!("keyspace {keyspace}: {e}")))?;
    check_overlap(level, &replication).map_err(|e| err(format!("keyspace {keyspace}: {e}")))
}

/// The Murmur3 token ring cut into `n` contiguous, inclusive ranges covering all of it.
pub fn token_ranges(n: i64) -> Vec<(i64, i64)> {
    let (min, max) = (i64::MIN as i128, i64::MAX as i128);
    let width = (max - min + 1) / n as i128;
    (0..n as i128)
        .map(|i| {
            let start = min + i * width;
            let end = if i == n as i128 - 1 { max } else { start + width - 1 };
            (start as i64, end as i64)
        })
        .collect()
}

#[async_trait]
impl Database for CassandraDatabase {
    async fn scan_keys<'a>(
        &'a self,
        filter: &'a str,
        concurrency: usize,
        sink: &'a (dyn for<'k> Fn(&'k [u8]) + Send + Sync),
    ) -> Result<u64, DatabaseError> {
        use futures::{StreamExt, TryStreamExt};
        let scans = token_ranges(SCAN_RANGES).into_iter().map(|(start, end)| async move {
            let mut attempt = 1;
            loop {
                match self.scan_range_once(filter, start, end, sink).await {
                    Err(e) if attempt < SCAN_ATTEMPTS => {
                        tracing::warn!(filter, start, end, attempt, cause = %e, "scan of a token range failed; scanning it again");
                        attempt += 1;
                        tokio::time::sleep(SCAN_RETRY_PAUSE).await;
                    }
                    result => return result,
                }
            }
        });
        let counts: Vec<u64> = futures::stream::iter(scans).buffer_unordered(concurrency.max(1)).try_collect().await?;
        Ok(counts.iter().sum())
    }

    async fn filters(&self) -> Result<Vec<FilterDef>, DatabaseError> {
        let result = self.session.execute_unpaged(&self.all_filters, ()).await.map_err(classify)?;
        let rows = result.into_rows_result().map_err(err)?;
        let defs: Vec<FilterRow> = rows.rows::<FilterRow>().map_err(err)?.collect::<Result<_, _>>().map_err(err)?;
        defs.into_iter().map(def_from_row).collect()
    }

    async fn resize_filter(&self, name: &str, capacity: u64, fp_rate: f64) -> Result<(), DatabaseError> {
        let name = name.to_owned();
        let capacity = i64::try_from(capacity).map_err(err)?;
        self.session.execute_unpaged(&self.resize, (capacity, fp_rate, name)).await.map_err(classify)?;
        Ok(())
    }

    #[instrument(skip_all, fields(filter))]
    async fn get(&self, filter: &str, key: &[u8]) -> Result<Option<Vec<u8>>, DatabaseError> {
        let values = (filter.to_owned(), key.to_vec());
        let result = self.session.execute_unpaged(&self.get_key, values).await.map_err(classify)?;
        let rows = result.into_rows_result().map_err(err)?;
        let row: Option<(Option<Vec<u8>>,)> = rows.maybe_first_row().map_err(err)?;
        Ok(row.map(|(value,)| value.unwrap_or_default()))
    }

    async fn put(&self, filter: &str, key: &[u8], value: &[u8]) -> Result<(), DatabaseError> {
        let values = (filter.to_owned(), key.to_vec(), value.to_vec());
        self.session.execute_unpaged(&self.put_key, values).await.map_err(classify)?;
        Ok(())
    }

    async fn delete(&self, filter: &str, key: &[u8]) -> Result<bool, DatabaseError> {
        let (filter, key) = (filter.to_owned(), key.to_vec());
        // Whether it was there is read first: informational (the answer's `deleted`), so it
        // need not be atomic with the delete.
        let existed = self.get(&filter, &key).await?.is_some();
        self.session.execute_unpaged(&self.delete_key, (filter, key)).await.map_err(classify)?;
        Ok(existed)
    }

    async fn create_filter(&self, def: &FilterDef) -> Result<(FilterDef, bool), DatabaseError> {
        let def = def.clone();
        let values = (
            def.name.clone(),
            def.key_format.to_string(),
            i64::try_from(def.capacity).map_err(err)?,
            def.fp_rate,
            i64::try_from(def.segment_bytes).map_err(err)?,
        );
        let result = self.session.execute_unpaged(&self.insert_filter, values).await.map_err(classify)?;
        // The first column of an LWT's result is `[applied]`.
        let rows = result.into_rows_result().map_err(err)?;
        let first: Option<scylla::value::Row> = rows.maybe_first_row().map_err(err)?;
        let applied = matches!(
            first.as_ref().and_then(|row| row.columns.first()),
            Some(Some(scylla::value::CqlValue::Boolean(true)))
        );
        // Whether we inserted or someone else did first, the stored row is the answer.
        let stored = self.filter(&def.name).await?.ok_or_else(|| err("filter definition vanished after insert"))?;
        Ok((stored, applied))
    }

    async fn filter(&self, name: &str) -> Result<Option<FilterDef>, DatabaseError> {
        let values = (name.to_owned(),);
        let result = self.session.execute_unpaged(&self.get_filter, values).await.map_err(classify)?;
        let rows = result.into_rows_result().map_err(err)?;
        let row: Option<FilterRow> = rows.maybe_first_row().map_err(err)?;
        row.map(def_from_row).transpose()
    }

    async fn drop_filter(&self, name: &str) -> Result<bool, DatabaseError> {
        self.delete_definition(name).await
    }

    async fn has_keys(&self, filter: &str) -> Result<bool, DatabaseError> {
        self.any_key_of(filter).await
    }

    async fn delete_keys(&self, filter: &str, concurrency: usize) -> Result<u64, DatabaseError> {
        self.delete_all_keys(filter, concurrency).await
    }

    async fn ping(&self) -> Result<(), DatabaseError> {
        self.session.execute_unpaged(&self.ping, ()).await.map_err(classify)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_ranges_cover_the_ring_without_gaps_or_overlap() {
        let ranges = token_ranges(64);
        assert_eq!(ranges.len(), 64);
        assert_eq!(ranges[0].0, i64::MIN);
        assert_eq!(ranges[63].1, i64::MAX);
        for pair in ranges.windows(2) {
            assert_eq!(pair[0].1.checked_add(1), Some(pair[1].0));
        }
    }
}
