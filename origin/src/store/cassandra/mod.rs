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
//!
//! The schema is versioned: [`migrations`] lists the steps that build it, each recorded in the
//! keyspace's `schema_migrations` once applied. `bloomgate-origin schema apply` (a Kubernetes
//! Job) or an origin with `cassandra_manage_schema = true` applies the ones a keyspace lacks;
//! an origin with `false` applies nothing and refuses a keyspace at another version.
//!
//! # Layout
//! - `connect`: the session, the schema applied or its version checked, the consistency
//!   checked.
//! - [`migrations`]: the schema's versions, what a keyspace lacks, the version check and the
//!   script for cqlsh (pure).
//! - `migrate`: applying the migrations a keyspace lacks, and reading the version it records.
//! - [`schema`]: the columns bloomgate uses, checked on a keyspace that records no version (pure).
//! - [`definition`]: a filter's definition as a row, and the format it is written in (pure).
//! - [`consistency`]: whether a level's reads meet its writes on a keyspace (pure).
//! - `statements`: every statement, prepared once.
//! - `scan`: a rebuild's read of one filter's keys, range by range.
//! - `drop`: a dropped filter's definition and keys deleted.
//! - `checkpoints`: checkpoints and their saved segments.
//! - `cluster`: the cluster version, the origins' reports and the log of recent writes.
//! - [`write_order`]: why writes and deletes are stamped by the origin, deletes a margin back.
//! - Here: the store itself and the `Database` calls of lookups, writes and definitions.

mod checkpoints;
mod cluster;
mod connect;
pub mod consistency;
pub mod definition;
mod drop;
mod migrate;
pub mod migrations;
mod scan;
pub mod schema;
mod statements;
pub mod write_order;

pub use migrate::SchemaApplied;
pub use scan::token_ranges;

use super::{Database, DatabaseError, Dropped, FilterDef, KeySink};
use crate::cluster_version::{ClusterVersion, LiveOrigin};
use crate::store::checkpoint::{Checkpoint, SavedSegment};
use async_trait::async_trait;
use consistency::Replication;
use definition::{def_from_row, row_of, DefinitionRow};
use scylla::client::session::Session;
use scylla::errors::{ExecutionError, RequestAttemptError};
use scylla::response::query_result::QueryResult;
use scylla::statement::Consistency;
use statements::Statements;
use std::sync::Arc;
use std::time::Duration;
use tracing::instrument;

/// Connection and schema settings.
#[derive(Clone, Debug)]
pub struct CassandraSettings {
    /// Contact points, `host:port`.
    pub nodes: Vec<String>,
    /// Keyspace, created if missing when the schema is applied.
    pub keyspace: String,
    /// Replication clause for a new keyspace, e.g.
    /// `{'class': 'NetworkTopologyStrategy', 'dc1': 3}`; empty = unset, and then a keyspace
    /// that does not exist is not created.
    pub replication: String,
    /// Apply the migrations the keyspace lacks at connect; `false` = apply nothing, and refuse
    /// a keyspace at another version than this build's.
    pub manage_schema: bool,
    /// Consistency for reads and writes.
    pub consistency: Consistency,
    /// Per-request timeout.
    pub timeout: Duration,
    /// How far back a delete is stamped: the most two origins' clocks may differ by (see
    /// [`write_order`]).
    pub delete_margin: Duration,
    /// Who the origin is to Cassandra, and how its connections are secured.
    pub access: CassandraAccess,
}

/// Who the origin is to Cassandra (PasswordAuthenticator's user and password), and the TLS
/// configuration of its connections (none: plaintext).
#[derive(Clone, Default)]
pub struct CassandraAccess {
    /// User and password.
    pub credentials: Option<(String, String)>,
    /// TLS (client encryption), verifying every node's certificate.
    pub tls: Option<Arc<rustls::ClientConfig>>,
}

impl std::fmt::Debug for CassandraAccess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the password.
        f.debug_struct("CassandraAccess")
            .field("user", &self.credentials.as_ref().map(|(user, _)| user))
            .field("tls", &self.tls.is_some())
            .finish()
    }
}

/// Cassandra as the database.
pub struct CassandraDatabase {
    session: Arc<Session>,
    statements: Statements,
    delete_margin: Duration,
    keyspace: String,
    consistency: Consistency,
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
        other => DatabaseError::other(other),
    }
}

/// Every row of a query's result, as `T`.
fn all_rows<T>(result: QueryResult) -> Result<Vec<T>, DatabaseError>
where
    T: for<'frame> scylla::deserialize::row::DeserializeRow<'frame, 'frame>,
{
    let rows = result.into_rows_result().map_err(DatabaseError::other)?;
    let rows = rows.rows::<T>().map_err(DatabaseError::other)?;
    rows.collect::<Result<_, _>>().map_err(DatabaseError::other)
}

/// Whether a lightweight transaction applied: the first column of its result is `[applied]`.
fn applied(result: QueryResult) -> Result<bool, DatabaseError> {
    let rows = result.into_rows_result().map_err(DatabaseError::other)?;
    let first: Option<scylla::value::Row> = rows.maybe_first_row().map_err(DatabaseError::other)?;
    Ok(matches!(first.as_ref().and_then(|row| row.columns.first()), Some(Some(scylla::value::CqlValue::Boolean(true)))))
}

impl CassandraDatabase {
    /// Connects, applies the migrations the keyspace lacks (or, when the operator applies the
    /// schema, checks its version), and prepares every statement.
    pub async fn connect(settings: &CassandraSettings) -> Result<CassandraDatabase, DatabaseError> {
        let session = connect::open(settings).await?;
        let statements = Statements::prepare(&session, settings).await?;
        Ok(CassandraDatabase {
            session: Arc::new(session),
            statements,
            delete_margin: settings.delete_margin,
            keyspace: settings.keyspace.clone(),
            consistency: settings.consistency,
        })
    }

    /// Applies the migrations the keyspace of `settings` lacks, creating it (with
    /// `settings.replication`) if it does not exist, and says what was done: what
    /// `bloomgate-origin schema apply` runs, and an origin that manages its schema at connect.
    pub async fn apply_schema(settings: &CassandraSettings) -> Result<SchemaApplied, DatabaseError> {
        let session = connect::session(settings).await?;
        migrate::apply(&session, settings).await
    }

    /// Whether reads at the configured level still see every acknowledged write for the
    /// keyspace's replication as the driver's schema metadata has it now (see
    /// [`consistency`]): an error, which fails the read or write, once it does not.
    fn replication_overlaps(&self) -> Result<(), DatabaseError> {
        let state = self.session.get_cluster_state();
        // Not in the metadata (the driver fetches no schema, or it is being refreshed): the
        // check at start-up stands.
        let Some(keyspace) = state.get_keyspace(&self.keyspace) else { return Ok(()) };
        let replication = Replication::from_driver(&keyspace.strategy)
            .and_then(|replication| consistency::check_overlap(self.consistency, &replication));
        replication.map_err(|e| {
            tracing::error!(keyspace = self.keyspace, cause = %e, "the keyspace's replication changed: reads and writes refused");
            DatabaseError::other(format!("keyspace {} changed after start-up: {e}", self.keyspace))
        })
    }

    /// Whether a rebuild's scan reads only its filter's keys (the filter index exists).
    pub fn scans_by_index(&self) -> bool {
        self.statements.scan_filter_range.is_some()
    }

    /// Stores `key` as a write made when this origin's clock read `now_us` (see
    /// [`write_order`]); `Database::put` is this at the clock's reading now.
    pub async fn put_at(&self, filter: &str, key: &[u8], value: &[u8], now_us: u64) -> Result<(), DatabaseError> {
        self.replication_overlaps()?;
        let stamp = write_order::write_timestamp(now_us);
        let values = (filter.to_owned(), key.to_vec(), value.to_vec(), stamp);
        self.session.execute_unpaged(&self.statements.put_key, values).await.map_err(classify)?;
        Ok(())
    }

    /// Removes `key`, ordered by `clock` (this origin's clock, in µs; see [`write_order`]):
    /// returns once every write sent from now on outranks the delete, true if the key was there.
    /// `Database::delete` is this on the origin's clock.
    pub async fn delete_at(
        &self,
        filter: &str,
        key: &[u8],
        clock: &(dyn Fn() -> u64 + Sync),
    ) -> Result<bool, DatabaseError> {
        // Whether it was there is read first: informational (the answer's `deleted`), so it
        // need not be atomic with the delete.
        let existed = self.get(filter, key).await?.is_some();
        let order = self.delete_stamped(filter, key.to_vec(), clock()).await?;
        wait_for_clock(order.ack_after_us, clock).await;
        Ok(existed)
    }

    /// The delete statement, ordered as a delete made when the clock read `now_us`; its order,
    /// whose wait the caller owes before acknowledging.
    pub(super) async fn delete_stamped(
        &self,
        filter: &str,
        key: Vec<u8>,
        now_us: u64,
    ) -> Result<write_order::DeleteOrder, DatabaseError> {
        let order = write_order::delete_order(now_us, self.delete_margin);
        self.session
            .execute_unpaged(&self.statements.delete_key, (order.stamp, filter.to_owned(), key))
            .await
            .map_err(classify)?;
        Ok(order)
    }

    /// The driver session, for scans that live outside this trait (rebuilds).
    pub fn session(&self) -> &Arc<Session> {
        &self.session
    }
}

/// Waits until `clock` reads past `after_us` (the commit wait of a delete, see
/// [`write_order`]). The clock is read again after each sleep: a clock that stepped back
/// makes the wait longer, never shorter.
async fn wait_for_clock(after_us: u64, clock: &(dyn Fn() -> u64 + Sync)) {
    loop {
        let now = clock();
        if now > after_us {
            return;
        }
        tokio::time::sleep(Duration::from_micros(after_us - now + 1)).await;
    }
}

#[async_trait]
impl Database for CassandraDatabase {
    async fn scan_keys(&self, filter: &str, concurrency: usize, sink: KeySink<'_>) -> Result<u64, DatabaseError> {
        // A rebuild's scan must meet every acknowledged write as a lookup must: a scan that
        // missed a key would build bits that answer "no" for it.
        self.replication_overlaps()?;
        self.scan_all_keys(filter, concurrency, sink).await
    }

    async fn filters(&self) -> Result<Vec<FilterDef>, DatabaseError> {
        self.replication_overlaps()?;
        let result = self.session.execute_unpaged(&self.statements.all_filters, ()).await.map_err(classify)?;
        // One definition this build cannot read fails the listing (see `def_cache` for how
        // lookups of the other filters still find theirs).
        all_rows::<DefinitionRow>(result)?.into_iter().map(def_from_row).collect()
    }

    async fn resize_filter(&self, name: &str, capacity: u64, fp_rate: f64) -> Result<(), DatabaseError> {
        let name = name.to_owned();
        let capacity = i64::try_from(capacity).map_err(DatabaseError::other)?;
        self.session.execute_unpaged(&self.statements.resize, (capacity, fp_rate, name)).await.map_err(classify)?;
        Ok(())
    }

    #[instrument(skip_all, fields(filter))]
    async fn get(&self, filter: &str, key: &[u8]) -> Result<Option<Vec<u8>>, DatabaseError> {
        self.replication_overlaps()?;
        let values = (filter.to_owned(), key.to_vec());
        let result = self.session.execute_unpaged(&self.statements.get_key, values).await.map_err(classify)?;
        let rows = result.into_rows_result().map_err(DatabaseError::other)?;
        let row: Option<(Option<Vec<u8>>,)> = rows.maybe_first_row().map_err(DatabaseError::other)?;
        Ok(row.map(|(value,)| value.unwrap_or_default()))
    }

    async fn put(&self, filter: &str, key: &[u8], value: &[u8]) -> Result<(), DatabaseError> {
        self.put_at(filter, key, value, crate::clock::now_us()).await
    }

    async fn delete(&self, filter: &str, key: &[u8]) -> Result<bool, DatabaseError> {
        self.delete_at(filter, key, &crate::clock::now_us).await
    }

    async fn create_filter(&self, def: &FilterDef) -> Result<(FilterDef, bool), DatabaseError> {
        let values = row_of(def)?;
        let result = self.session.execute_unpaged(&self.statements.insert_filter, values).await.map_err(classify)?;
        let applied = applied(result)?;
        // Whether we inserted or someone else did first, the stored row is the answer.
        let stored = self
            .filter(&def.name)
            .await?
            .ok_or_else(|| DatabaseError::other("filter definition vanished after insert"))?;
        Ok((stored, applied))
    }

    async fn filter(&self, name: &str) -> Result<Option<FilterDef>, DatabaseError> {
        self.replication_overlaps()?;
        let values = (name.to_owned(),);
        let result = self.session.execute_unpaged(&self.statements.get_filter, values).await.map_err(classify)?;
        let rows = result.into_rows_result().map_err(DatabaseError::other)?;
        let row: Option<DefinitionRow> = rows.maybe_first_row().map_err(DatabaseError::other)?;
        row.map(def_from_row).transpose()
    }

    async fn drop_filter(&self, name: &str, dropped: Dropped) -> Result<bool, DatabaseError> {
        self.replication_overlaps()?;
        self.record_drop(name, dropped).await?;
        // A filter created again under the name must never be seeded with the dropped one's
        // bits: its checkpoint goes before the definition does.
        self.forget_checkpoint(name).await?;
        self.delete_definition(name).await
    }

    async fn dropped(&self, name: &str) -> Result<Option<Dropped>, DatabaseError> {
        // Read as a definition is: it decides what a filter created again may be.
        self.replication_overlaps()?;
        self.drop_record(name).await
    }

    async fn has_keys(&self, filter: &str) -> Result<bool, DatabaseError> {
        // "No key" lets a filter start from empty bits: it must be as true as a lookup's "no".
        self.replication_overlaps()?;
        self.any_key_of(filter).await
    }

    async fn delete_keys(&self, filter: &str, concurrency: usize) -> Result<u64, DatabaseError> {
        self.replication_overlaps()?;
        self.delete_all_keys(filter, concurrency).await
    }

    async fn ping(&self) -> Result<(), DatabaseError> {
        self.session.execute_unpaged(&self.statements.ping, ()).await.map_err(classify)?;
        Ok(())
    }

    async fn cluster_version(&self) -> Result<ClusterVersion, DatabaseError> {
        self.read_cluster_version().await
    }

    async fn raise_cluster_version(&self, from: u32, to: u32) -> Result<bool, DatabaseError> {
        self.raise_cluster(from, to).await
    }

    async fn report_origin(&self, report: &LiveOrigin) -> Result<(), DatabaseError> {
        self.write_report(report).await
    }

    async fn origin_reports(&self) -> Result<Vec<LiveOrigin>, DatabaseError> {
        self.read_reports().await
    }

    async fn log_recent_writes(&self, filter: &str, keys: &[&[u8]], at_ms: u64) -> Result<(), DatabaseError> {
        self.log_writes(filter, keys, at_ms).await
    }

    async fn recent_writes_in(&self, filter: &str, bucket: i64) -> Result<Vec<Vec<u8>>, DatabaseError> {
        self.replication_overlaps()?;
        self.logged_in(filter, bucket).await
    }

    async fn checkpoint(&self, filter: &str) -> Result<Option<Checkpoint>, DatabaseError> {
        self.replication_overlaps()?;
        self.read_checkpoint(filter).await
    }

    async fn saved_segments(&self, filter: &str, generation: u64) -> Result<Vec<SavedSegment>, DatabaseError> {
        self.replication_overlaps()?;
        self.read_saved_segments(filter, generation).await
    }

    async fn save_segment(
        &self,
        filter: &str,
        generation: u64,
        segment: SavedSegment,
        bits: &[u8],
        read_at_ms: u64,
    ) -> Result<(), DatabaseError> {
        self.replication_overlaps()?;
        self.write_segment(filter, generation, segment, bits, read_at_ms).await
    }

    async fn saved_segment_bits(
        &self,
        filter: &str,
        generation: u64,
        index: u32,
    ) -> Result<Option<Vec<u8>>, DatabaseError> {
        self.replication_overlaps()?;
        self.read_segment_bits(filter, generation, index).await
    }

    async fn record_checkpoint(&self, filter: &str, checkpoint: Checkpoint) -> Result<(), DatabaseError> {
        self.replication_overlaps()?;
        self.write_checkpoint(filter, checkpoint).await
    }

    async fn forget_saved_segments(&self, filter: &str, generation: u64) -> Result<(), DatabaseError> {
        self.delete_saved_segments(filter, generation).await
    }
}
