//! Every CQL statement the store runs, prepared once at start-up with the configured
//! consistency, timeout and idempotence (see the module doc of `cassandra` for why one level
//! serves all of them, and the one exception).

use super::migrations::{filter_index, start_cluster_version_statement};
use super::schema::FILTER_INDEX;
use super::{definition, CassandraSettings};
use crate::store::DatabaseError;
use scylla::client::session::Session;
use scylla::statement::prepared::PreparedStatement;
use scylla::statement::{Consistency, SerialConsistency};
use std::time::Duration;

/// Rows per page of a scan.
const SCAN_PAGE: i32 = 5000;

/// The prepared statements.
pub(super) struct Statements {
    /// A key's value, by its full partition key.
    pub get_key: PreparedStatement,
    /// A key stored (a plain insert, stamped by the origin).
    pub put_key: PreparedStatement,
    /// A key deleted (a plain delete, stamped by the origin, the skew margin back).
    pub delete_key: PreparedStatement,
    /// A definition inserted unless one exists (a lightweight transaction).
    pub insert_filter: PreparedStatement,
    /// One definition.
    pub get_filter: PreparedStatement,
    /// Every definition.
    pub all_filters: PreparedStatement,
    /// A definition's sizing changed (a lightweight transaction).
    pub resize: PreparedStatement,
    /// A definition deleted (a lightweight transaction).
    pub drop_filter: PreparedStatement,
    /// A drop record written (a plain overwrite: see `store::drop_record`).
    pub record_drop: PreparedStatement,
    /// The drop record of a name.
    pub get_drop: PreparedStatement,
    /// Every key in a token range, read whole.
    pub scan_range: PreparedStatement,
    /// One filter's keys in a token range, through the filter index (if it exists).
    pub scan_filter_range: Option<PreparedStatement>,
    /// One key of a filter, through the filter index (if it exists).
    pub any_key: Option<PreparedStatement>,
    /// The health ping.
    pub ping: PreparedStatement,
    /// The cluster version's row.
    pub get_cluster_version: PreparedStatement,
    /// The cluster version raised, if it still is what the raise read (a lightweight transaction).
    pub raise_cluster_version: PreparedStatement,
    /// The cluster version's row written where there is none (a lightweight transaction).
    pub insert_cluster_version: PreparedStatement,
    /// An origin's report that it runs.
    pub report_origin: PreparedStatement,
    /// Every origin's report.
    pub origin_reports: PreparedStatement,
    /// A key logged in the recent writes.
    pub log_write: PreparedStatement,
    /// One bucket of a filter's log, paged.
    pub logged_in: PreparedStatement,
    /// A filter's checkpoint record.
    pub get_checkpoint: PreparedStatement,
    /// A checkpoint recorded, at its `R`.
    pub put_checkpoint: PreparedStatement,
    /// A checkpoint record deleted (a drop).
    pub delete_checkpoint: PreparedStatement,
    /// The labels of a generation's saved segments, paged.
    pub saved_segments: PreparedStatement,
    /// A segment saved, at its read.
    pub save_segment: PreparedStatement,
    /// A saved segment's bits.
    pub segment_bits: PreparedStatement,
    /// A generation's saved segments deleted.
    pub delete_segments: PreparedStatement,
}

/// Prepares statements on one session at the configured level and timeout.
struct Preparer<'a> {
    session: &'a Session,
    settings: &'a CassandraSettings,
}

impl Preparer<'_> {
    async fn prepare(&self, cql: String, idempotent: bool) -> Result<PreparedStatement, DatabaseError> {
        let mut p = self.session.prepare(cql).await.map_err(DatabaseError::other)?;
        p.set_consistency(self.settings.consistency);
        p.set_request_timeout(Some(self.settings.timeout));
        p.set_is_idempotent(idempotent);
        Ok(p)
    }

    /// A lightweight transaction: never retried blindly, and with a serial consistency
    /// (SERIAL works on one node and many).
    async fn prepare_lwt(&self, cql: String) -> Result<PreparedStatement, DatabaseError> {
        let mut p = self.prepare(cql, false).await?;
        p.set_serial_consistency(Some(SerialConsistency::Serial));
        Ok(p)
    }

    /// A scan, paged. Prepared like the rest, so every page runs at the configured level
    /// (LOCAL_QUORUM by default), never the driver's default; a rebuild may take minutes, so
    /// each page gets a generous timeout, not the lookup one.
    async fn prepare_scan(&self, cql: String) -> Result<PreparedStatement, DatabaseError> {
        let mut scan = self.prepare(cql, true).await?;
        scan.set_page_size(SCAN_PAGE);
        scan.set_request_timeout(Some(self.settings.timeout.max(Duration::from_secs(10))));
        Ok(scan)
    }
}

impl Statements {
    /// Prepares every statement against the keyspace in `settings`.
    pub async fn prepare(session: &Session, settings: &CassandraSettings) -> Result<Statements, DatabaseError> {
        let p = Preparer { session, settings };
        let ks = &settings.keyspace;
        let definition = definition::COLUMNS;
        let (scan_filter_range, any_key) = indexed(&p, settings).await;
        let mut ping = p.prepare("SELECT release_version FROM system.local".to_string(), true).await?;
        // The one exception to the configured level (see the module doc): a node-local table.
        ping.set_consistency(Consistency::One);
        Ok(Statements {
            get_key: p.prepare(format!("SELECT value FROM {ks}.keys WHERE filter = ? AND key = ?"), true).await?,
            // Both stamped by the origin (see `write_order`), never by the coordinator.
            put_key: p
                .prepare(format!("INSERT INTO {ks}.keys (filter, key, value) VALUES (?, ?, ?) USING TIMESTAMP ?"), true)
                .await?,
            // A plain delete, like the plain insert: a lightweight-transaction delete mixed with
            // plain inserts on the same rows orders them by two different clocks (Paxos ballots
            // and write timestamps), and could shadow an insert acknowledged after it.
            delete_key: p
                .prepare(format!("DELETE FROM {ks}.keys USING TIMESTAMP ? WHERE filter = ? AND key = ?"), true)
                .await?,
            // Definitions are written only by lightweight transactions (create, resize, drop),
            // never mixed with plain writes.
            insert_filter: p
                .prepare_lwt(format!("INSERT INTO {ks}.filters ({definition}) VALUES (?, ?, ?, ?, ?, ?) IF NOT EXISTS"))
                .await?,
            get_filter: p.prepare(format!("SELECT {definition} FROM {ks}.filters WHERE name = ?"), true).await?,
            all_filters: p.prepare(format!("SELECT {definition} FROM {ks}.filters"), true).await?,
            resize: p
                .prepare_lwt(format!("UPDATE {ks}.filters SET capacity = ?, fp_rate = ? WHERE name = ? IF EXISTS"))
                .await?,
            drop_filter: p.prepare_lwt(format!("DELETE FROM {ks}.filters WHERE name = ? IF EXISTS")).await?,
            record_drop: p
                .prepare(
                    format!("INSERT INTO {ks}.dropped_filters (name, format, key_format, last_generation, dropped_at) VALUES (?, ?, ?, ?, toTimestamp(now()))"),
                    true,
                )
                .await?,
            get_drop: p
                .prepare(format!("SELECT format, key_format, last_generation FROM {ks}.dropped_filters WHERE name = ?"), true)
                .await?,
            scan_range: p
                .prepare_scan(format!(
                    "SELECT filter, key FROM {ks}.keys WHERE token(filter, key) >= ? AND token(filter, key) <= ?"
                ))
                .await?,
            scan_filter_range,
            any_key,
            ping,
            get_cluster_version: p
                .prepare(format!("SELECT format, version, raised_at FROM {ks}.cluster_version WHERE scope = 'cluster'"), true)
                .await?,
            raise_cluster_version: p
                .prepare_lwt(format!(
                    "UPDATE {ks}.cluster_version SET version = ?, raised_at = ?, format = ? WHERE scope = 'cluster' IF version = ?"
                ))
                .await?,
            // The statement `schema apply` starts a keyspace's version with (version, format,
            // raised at).
            insert_cluster_version: p.prepare_lwt(start_cluster_version_statement(ks)).await?,
            report_origin: p
                .prepare(
                    format!("INSERT INTO {ks}.origin_reports (origin, format, release, knows, reported_at) VALUES (?, ?, ?, ?, ?)"),
                    true,
                )
                .await?,
            origin_reports: p
                .prepare(format!("SELECT origin, format, release, knows, reported_at FROM {ks}.origin_reports"), true)
                .await?,
            log_write: p
                .prepare(
                    format!("INSERT INTO {ks}.recent_writes (filter, bucket, written_at, key, format) VALUES (?, ?, ?, ?, ?)"),
                    true,
                )
                .await?,
            logged_in: p
                .prepare_scan(format!("SELECT key, format FROM {ks}.recent_writes WHERE filter = ? AND bucket = ?"))
                .await?,
            get_checkpoint: p
                .prepare(format!("SELECT format, generation, params, taken_at FROM {ks}.checkpoints WHERE filter = ?"), true)
                .await?,
            put_checkpoint: p
                .prepare(
                    format!("INSERT INTO {ks}.checkpoints (filter, format, generation, params, taken_at) VALUES (?, ?, ?, ?, ?) USING TIMESTAMP ?"),
                    true,
                )
                .await?,
            delete_checkpoint: p.prepare(format!("DELETE FROM {ks}.checkpoints WHERE filter = ?"), true).await?,
            saved_segments: p
                .prepare_scan(format!(
                    "SELECT segment, format, version, incarnation FROM {ks}.checkpoint_segments WHERE filter = ? AND generation = ?"
                ))
                .await?,
            save_segment: p
                .prepare(
                    format!("INSERT INTO {ks}.checkpoint_segments (filter, generation, segment, format, version, incarnation, bits) VALUES (?, ?, ?, ?, ?, ?, ?) USING TIMESTAMP ?"),
                    true,
                )
                .await?,
            segment_bits: p
                .prepare(
                    format!("SELECT format, bits FROM {ks}.checkpoint_segments WHERE filter = ? AND generation = ? AND segment = ?"),
                    true,
                )
                .await?,
            delete_segments: p
                .prepare(format!("DELETE FROM {ks}.checkpoint_segments WHERE filter = ? AND generation = ?"), true)
                .await?,
        })
    }
}

/// The statements that go through the filter index: one filter's keys in a token range, and
/// any one key of a filter. Without the index (a schema managed elsewhere that lacks it) they
/// do not prepare, and rebuilds read the whole table.
async fn indexed(
    p: &Preparer<'_>,
    settings: &CassandraSettings,
) -> (Option<PreparedStatement>, Option<PreparedStatement>) {
    let ks = &settings.keyspace;
    let scan = p
        .prepare_scan(format!(
            "SELECT filter, key FROM {ks}.keys WHERE filter = ? AND token(filter, key) >= ? AND token(filter, key) <= ?"
        ))
        .await;
    let scan = match scan {
        Ok(scan) => Some(scan),
        Err(e) => {
            tracing::warn!(
                cause = %e,
                "no index {FILTER_INDEX} on {ks}.keys: rebuilds read the whole table; create it with: {}",
                filter_index(ks)
            );
            None
        }
    };
    let any_key = p.prepare(format!("SELECT key FROM {ks}.keys WHERE filter = ? LIMIT 1"), true).await.ok();
    (scan, any_key)
}
