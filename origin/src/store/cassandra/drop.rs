//! What dropping a filter asks of Cassandra: its drop record kept and its definition deleted (a
//! lightweight transaction, as every definition write), whether it holds keys, and its keys deleted range
//! by range through the filter index (or by reading each range whole without it), in bounded
//! chunks: a filter of any size is deleted in constant memory.

use super::scan::{token_ranges, SCAN_RANGES};
use super::{applied, classify, CassandraDatabase};
use crate::store::drop_record::StoredDrop;
use crate::store::{DatabaseError, Dropped};
use futures::{StreamExt, TryStreamExt};
use scylla::statement::prepared::PreparedStatement;
use std::sync::atomic::{AtomicU64, Ordering};

/// Keys deleted at once (concurrently) while a range is read.
const DELETE_CHUNK: usize = 512;
/// Deletes in flight per chunk.
const DELETES_IN_FLIGHT: usize = 32;

impl CassandraDatabase {
    /// Writes the drop record of `name` (at the configured level, so a create that reads it
    /// after finding the definition gone meets it).
    pub(super) async fn record_drop(&self, name: &str, dropped: Dropped) -> Result<(), DatabaseError> {
        let StoredDrop { format, key_format, last_generation } = StoredDrop::of(dropped)?;
        let values = (name.to_owned(), format, key_format, last_generation);
        self.session.execute_unpaged(&self.statements.record_drop, values).await.map_err(classify)?;
        Ok(())
    }

    /// The drop record of `name`, if one was written.
    pub(super) async fn drop_record(&self, name: &str) -> Result<Option<Dropped>, DatabaseError> {
        let result =
            self.session.execute_unpaged(&self.statements.get_drop, (name.to_owned(),)).await.map_err(classify)?;
        let rows = result.into_rows_result().map_err(DatabaseError::other)?;
        let row: Option<(Option<i32>, String, i64)> = rows.maybe_first_row().map_err(DatabaseError::other)?;
        row.map(|(format, key_format, last_generation)| {
            StoredDrop { format: format.unwrap_or(0), key_format, last_generation }.read(name)
        })
        .transpose()
    }

    /// Deletes the definition; true if it existed.
    pub(super) async fn delete_definition(&self, name: &str) -> Result<bool, DatabaseError> {
        let result =
            self.session.execute_unpaged(&self.statements.drop_filter, (name.to_owned(),)).await.map_err(classify)?;
        applied(result)
    }

    /// Whether `filter` holds a key, read through the filter index; without the index (or while
    /// it cannot answer) the table would have to be read whole to tell, so: maybe (true).
    pub(super) async fn any_key_of(&self, filter: &str) -> Result<bool, DatabaseError> {
        let Some(any_key) = &self.statements.any_key else { return Ok(true) };
        match self.session.execute_unpaged(any_key, (filter.to_owned(),)).await {
            Ok(result) => {
                let rows = result.into_rows_result().map_err(DatabaseError::other)?;
                Ok(rows.rows_num() > 0)
            }
            Err(e) => {
                tracing::warn!(filter, cause = %e, "the filter index could not say whether the filter holds keys: assuming it does");
                Ok(true)
            }
        }
    }

    /// Deletes every key of `filter`, `concurrency` token ranges at a time; returns how many,
    /// once every write sent from then on outranks each of the deletes (the commit wait of
    /// `write_order`, owed once, for the last delete stamped).
    pub(super) async fn delete_all_keys(&self, filter: &str, concurrency: usize) -> Result<u64, DatabaseError> {
        let last_ack_after = AtomicU64::new(0);
        let ranges = token_ranges(SCAN_RANGES)
            .into_iter()
            .map(|(start, end)| self.delete_range(filter, start, end, &last_ack_after));
        let counts: Vec<u64> = futures::stream::iter(ranges).buffer_unordered(concurrency.max(1)).try_collect().await?;
        super::wait_for_clock(last_ack_after.load(Ordering::SeqCst), &crate::clock::now_us).await;
        Ok(counts.iter().sum())
    }

    /// The keys of `filter` in one token range, through the index if it answers, else the
    /// range read whole.
    async fn delete_range(&self, filter: &str, start: i64, end: i64, acks: &AtomicU64) -> Result<u64, DatabaseError> {
        if let Some(indexed) = &self.statements.scan_filter_range {
            match self.delete_rows(indexed, (filter, start, end), filter, acks).await {
                Ok(n) => return Ok(n),
                Err(e) => {
                    tracing::warn!(filter, start, end, cause = %e, "delete through the filter index failed; reading the range whole")
                }
            }
        }
        self.delete_rows(&self.statements.scan_range, (start, end), filter, acks).await
    }

    /// Reads rows `(filter, key)` from `scan` and deletes those of `filter`, a chunk at a time;
    /// the latest clock reading a delete may be acknowledged after is raised into `acks`.
    async fn delete_rows(
        &self,
        scan: &PreparedStatement,
        values: impl scylla::serialize::row::SerializeRow,
        filter: &str,
        acks: &AtomicU64,
    ) -> Result<u64, DatabaseError> {
        let rows = self.session.execute_iter(scan.clone(), values).await.map_err(DatabaseError::other)?;
        let mut rows = rows.rows_stream::<(String, Vec<u8>)>().map_err(DatabaseError::other)?;
        let (mut chunk, mut deleted) = (Vec::with_capacity(DELETE_CHUNK), 0u64);
        loop {
            let row = rows.try_next().await.map_err(DatabaseError::other)?;
            let done = row.is_none();
            if let Some((row_filter, key)) = row {
                if row_filter == filter {
                    chunk.push(key);
                }
            }
            if chunk.len() == DELETE_CHUNK || (done && !chunk.is_empty()) {
                deleted += self.delete_chunk(filter, std::mem::take(&mut chunk), acks).await?;
            }
            if done {
                return Ok(deleted);
            }
        }
    }

    async fn delete_chunk(&self, filter: &str, keys: Vec<Vec<u8>>, acks: &AtomicU64) -> Result<u64, DatabaseError> {
        let n = keys.len() as u64;
        // Ordered as every delete (see `write_order`): they outrank every write acknowledged
        // before the drop, and a filter created again under the name writes its keys after the
        // drop's wait, so those outrank them.
        let now_us = crate::clock::now_us();
        let deletes = keys.into_iter().map(|key| self.delete_stamped(filter, key, now_us));
        futures::stream::iter(deletes)
            .buffer_unordered(DELETES_IN_FLIGHT)
            .try_for_each(|order| {
                acks.fetch_max(order.ack_after_us, Ordering::SeqCst);
                async { Ok(()) }
            })
            .await?;
        Ok(n)
    }
}
