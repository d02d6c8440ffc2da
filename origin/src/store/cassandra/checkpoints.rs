//! What checkpoints ask of Cassandra (see `store::checkpoint`): the record naming a filter's
//! newest checkpoint, and the segments saved for a generation, each written `USING TIMESTAMP`
//! of its read, so that of two checkpointers the later read wins; and the log of recent writes
//! read back, one bucket at a time, for a replay.

use super::{classify, CassandraDatabase};
use crate::store::checkpoint::{Checkpoint, SavedSegment, CHECKPOINT_FORMAT};
use crate::store::recent_writes::RECENT_WRITE_FORMAT;
use crate::store::DatabaseError;
use futures::TryStreamExt;
use scylla::value::CqlTimestamp;

impl CassandraDatabase {
    /// The newest checkpoint of `filter`; None in a newer format (a full scan, not a guess).
    pub(super) async fn read_checkpoint(&self, filter: &str) -> Result<Option<Checkpoint>, DatabaseError> {
        let result = self
            .session
            .execute_unpaged(&self.statements.get_checkpoint, (filter.to_owned(),))
            .await
            .map_err(classify)?;
        let rows = result.into_rows_result().map_err(DatabaseError::other)?;
        let row: Option<(Option<i32>, i64, String, CqlTimestamp)> =
            rows.maybe_first_row().map_err(DatabaseError::other)?;
        let Some((format, generation, params, taken_at)) = row else { return Ok(None) };
        if format.unwrap_or(CHECKPOINT_FORMAT) > CHECKPOINT_FORMAT {
            tracing::warn!(filter, ?format, "a checkpoint in a newer format: not used");
            return Ok(None);
        }
        let params = serde_json::from_str(&params).map_err(DatabaseError::other)?;
        Ok(Some(Checkpoint { generation: generation as u64, params, taken_at_ms: taken_at.0.max(0) as u64 }))
    }

    /// Records `checkpoint` as `filter`'s newest, written at `R` (in µs): a checkpoint of an
    /// earlier round recorded late never replaces a later one.
    pub(super) async fn write_checkpoint(&self, filter: &str, checkpoint: Checkpoint) -> Result<(), DatabaseError> {
        let params = serde_json::to_string(&checkpoint.params).map_err(DatabaseError::other)?;
        let values = (
            filter.to_owned(),
            CHECKPOINT_FORMAT,
            checkpoint.generation as i64,
            params,
            CqlTimestamp(checkpoint.taken_at_ms as i64),
            (checkpoint.taken_at_ms * 1000) as i64,
        );
        self.session.execute_unpaged(&self.statements.put_checkpoint, values).await.map_err(classify)?;
        Ok(())
    }

    /// Forgets `filter`'s checkpoint and the segments it named (a drop).
    pub(super) async fn forget_checkpoint(&self, filter: &str) -> Result<(), DatabaseError> {
        if let Some(checkpoint) = self.read_checkpoint(filter).await? {
            self.delete_saved_segments(filter, checkpoint.generation).await?;
        }
        self.session
            .execute_unpaged(&self.statements.delete_checkpoint, (filter.to_owned(),))
            .await
            .map_err(classify)?;
        Ok(())
    }

    /// The labels of the segments saved for a generation.
    pub(super) async fn read_saved_segments(
        &self,
        filter: &str,
        generation: u64,
    ) -> Result<Vec<SavedSegment>, DatabaseError> {
        let values = (filter.to_owned(), generation as i64);
        let mut rows = self
            .session
            .execute_iter(self.statements.saved_segments.clone(), values)
            .await
            .map_err(DatabaseError::other)?
            .rows_stream::<(i32, Option<i32>, i64, i64)>()
            .map_err(DatabaseError::other)?;
        let mut saved = Vec::new();
        while let Some((index, format, version, incarnation)) = rows.try_next().await.map_err(DatabaseError::other)? {
            // A segment saved in a newer format is saved again in this one.
            if format.unwrap_or(CHECKPOINT_FORMAT) <= CHECKPOINT_FORMAT {
                saved.push(SavedSegment {
                    index: index as u32,
                    version: version as u64,
                    incarnation: incarnation as u64,
                });
            }
        }
        Ok(saved)
    }

    /// Saves a segment's bits, as read at `read_at_ms`.
    pub(super) async fn write_segment(
        &self,
        filter: &str,
        generation: u64,
        segment: SavedSegment,
        bits: &[u8],
        read_at_ms: u64,
    ) -> Result<(), DatabaseError> {
        let values = (
            filter.to_owned(),
            generation as i64,
            segment.index as i32,
            CHECKPOINT_FORMAT,
            segment.version as i64,
            segment.incarnation as i64,
            bits.to_vec(),
            (read_at_ms * 1000) as i64,
        );
        self.session.execute_unpaged(&self.statements.save_segment, values).await.map_err(classify)?;
        Ok(())
    }

    /// A saved segment's bits (None: not saved, or in a newer format).
    pub(super) async fn read_segment_bits(
        &self,
        filter: &str,
        generation: u64,
        index: u32,
    ) -> Result<Option<Vec<u8>>, DatabaseError> {
        let values = (filter.to_owned(), generation as i64, index as i32);
        let result = self.session.execute_unpaged(&self.statements.segment_bits, values).await.map_err(classify)?;
        let rows = result.into_rows_result().map_err(DatabaseError::other)?;
        let row: Option<(Option<i32>, Vec<u8>)> = rows.maybe_first_row().map_err(DatabaseError::other)?;
        Ok(row.filter(|(format, _)| format.unwrap_or(CHECKPOINT_FORMAT) <= CHECKPOINT_FORMAT).map(|(_, bits)| bits))
    }

    /// Deletes the segments saved for a generation (one partition).
    pub(super) async fn delete_saved_segments(&self, filter: &str, generation: u64) -> Result<(), DatabaseError> {
        let values = (filter.to_owned(), generation as i64);
        self.session.execute_unpaged(&self.statements.delete_segments, values).await.map_err(classify)?;
        Ok(())
    }

    /// The keys logged in one bucket of `filter`'s log, paged. A row in a newer format is an
    /// error: a replay that cannot read every row is no replay (the caller scans instead).
    pub(super) async fn logged_in(&self, filter: &str, bucket: i64) -> Result<Vec<Vec<u8>>, DatabaseError> {
        let mut rows = self
            .session
            .execute_iter(self.statements.logged_in.clone(), (filter.to_owned(), bucket))
            .await
            .map_err(DatabaseError::other)?
            .rows_stream::<(Vec<u8>, Option<i32>)>()
            .map_err(DatabaseError::other)?;
        let mut keys = Vec::new();
        while let Some((key, format)) = rows.try_next().await.map_err(DatabaseError::other)? {
            let format = format.unwrap_or(RECENT_WRITE_FORMAT);
            if format > RECENT_WRITE_FORMAT {
                return Err(DatabaseError::other(format!(
                    "a row of the recent writes is in format {format}, and this origin reads up to {RECENT_WRITE_FORMAT}"
                )));
            }
            keys.push(key);
        }
        Ok(keys)
    }
}
