//! What the cluster version asks of Cassandra (see `cluster_version`): its row read and raised
//! by a lightweight transaction, the origins' reports, and the log of recent writes, one
//! single-partition batch per write.

use super::{all_rows, applied, classify, CassandraDatabase};
use crate::cluster_version::{ClusterVersion, LiveOrigin, RECORD_FORMAT, UNRECORDED};
use crate::store::recent_writes::{bucket_of, RECENT_WRITE_FORMAT};
use crate::store::DatabaseError;
use scylla::statement::batch::{Batch, BatchType};
use scylla::value::CqlTimestamp;

impl CassandraDatabase {
    /// The cluster version's row ([`ClusterVersion::unrecorded`] where there is none); a row
    /// in a newer format is refused, never guessed at.
    pub(super) async fn read_cluster_version(&self) -> Result<ClusterVersion, DatabaseError> {
        let result = self.session.execute_unpaged(&self.statements.get_cluster_version, ()).await.map_err(classify)?;
        let rows = result.into_rows_result().map_err(DatabaseError::other)?;
        let row: Option<(Option<i32>, Option<i32>, Option<CqlTimestamp>)> =
            rows.maybe_first_row().map_err(DatabaseError::other)?;
        let Some((format, version, raised_at)) = row else { return Ok(ClusterVersion::unrecorded()) };
        let format = format.unwrap_or(RECORD_FORMAT);
        if format > RECORD_FORMAT {
            return Err(DatabaseError::other(format!(
                "the cluster version's row is in format {format}, and this origin reads formats up to {RECORD_FORMAT}: upgrade this origin"
            )));
        }
        Ok(ClusterVersion {
            version: version.and_then(|v| u32::try_from(v).ok()).unwrap_or(UNRECORDED),
            raised_at_ms: raised_at.map_or(0, |t| t.0.max(0) as u64),
        })
    }

    /// Raises the cluster version from `from` to `to` if it still is `from`: an update of the
    /// row on condition, or, where no row was recorded (read as [`UNRECORDED`]), an insert
    /// unless one exists.
    pub(super) async fn raise_cluster(&self, from: u32, to: u32) -> Result<bool, DatabaseError> {
        let (from, to) = (to_int(from)?, to_int(to)?);
        let now = CqlTimestamp(crate::clock::now_ms() as i64);
        let update = (to, now, RECORD_FORMAT, from);
        let result =
            self.session.execute_unpaged(&self.statements.raise_cluster_version, update).await.map_err(classify)?;
        if applied(result)? {
            return Ok(true);
        }
        if from != UNRECORDED as i32 {
            return Ok(false);
        }
        let insert = (to, RECORD_FORMAT, now);
        let result =
            self.session.execute_unpaged(&self.statements.insert_cluster_version, insert).await.map_err(classify)?;
        applied(result)
    }

    /// Writes an origin's report (it expires with the table's TTL unless renewed).
    pub(super) async fn write_report(&self, report: &LiveOrigin) -> Result<(), DatabaseError> {
        let values = (
            report.origin.clone(),
            RECORD_FORMAT,
            report.release.clone(),
            to_int(report.knows)?,
            CqlTimestamp(report.reported_at_ms as i64),
        );
        self.session.execute_unpaged(&self.statements.report_origin, values).await.map_err(classify)?;
        Ok(())
    }

    /// Every report not yet expired; one in a newer format is skipped (a newer origin, which
    /// knows at least what this build does).
    pub(super) async fn read_reports(&self) -> Result<Vec<LiveOrigin>, DatabaseError> {
        let result = self.session.execute_unpaged(&self.statements.origin_reports, ()).await.map_err(classify)?;
        type Row = (String, Option<i32>, Option<String>, Option<i32>, Option<CqlTimestamp>);
        let rows: Vec<Row> = all_rows(result)?;
        Ok(rows
            .into_iter()
            .filter(|(_, format, ..)| format.unwrap_or(RECORD_FORMAT) <= RECORD_FORMAT)
            .map(|(origin, _, release, knows, reported_at)| LiveOrigin {
                origin,
                release: release.unwrap_or_default(),
                knows: knows.and_then(|k| u32::try_from(k).ok()).unwrap_or(UNRECORDED),
                reported_at_ms: reported_at.map_or(0, |t| t.0.max(0) as u64),
            })
            .collect())
    }

    /// Logs `keys` of `filter` as written at `at_ms`: one partition (filter, bucket), so one
    /// unlogged batch is one mutation of one replica set, at the configured level.
    pub(super) async fn log_writes(&self, filter: &str, keys: &[&[u8]], at_ms: u64) -> Result<(), DatabaseError> {
        if keys.is_empty() {
            return Ok(());
        }
        self.replication_overlaps()?;
        let (bucket, written_at) = (bucket_of(at_ms), CqlTimestamp(at_ms as i64));
        let values: Vec<_> =
            keys.iter().map(|key| (filter.to_owned(), bucket, written_at, key.to_vec(), RECENT_WRITE_FORMAT)).collect();
        if let [one] = values.as_slice() {
            self.session.execute_unpaged(&self.statements.log_write, one).await.map_err(classify)?;
            return Ok(());
        }
        let mut batch = Batch::new(BatchType::Unlogged);
        for _ in &values {
            batch.append_statement(self.statements.log_write.clone());
        }
        batch.set_consistency(self.consistency);
        batch.set_request_timeout(self.statements.log_write.get_request_timeout());
        batch.set_is_idempotent(true);
        self.session.batch(&batch, values).await.map_err(classify)?;
        Ok(())
    }
}

fn to_int(version: u32) -> Result<i32, DatabaseError> {
    i32::try_from(version).map_err(DatabaseError::other)
}
