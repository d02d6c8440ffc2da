//! A rebuild's read of every key of one filter: the token ring cut into ranges, scanned
//! concurrently, each through the filter index when there is one (else read whole and filtered
//! here), each tried again after a failure.

use super::CassandraDatabase;
use crate::store::{DatabaseError, KeySink};
use futures::{StreamExt, TryStreamExt};
use scylla::statement::prepared::PreparedStatement;
use std::time::Duration;

/// Token ranges a full scan is cut into: enough for parallelism and resumable progress on a
/// cluster, each a bounded, paged query.
pub(super) const SCAN_RANGES: i64 = 64;
/// Attempts per token range of a scan. A page can time out while a replica has died and the
/// ring has not yet marked it down (seen on the 3-node ring, `tests/tests/cassandra_ring.rs`:
/// pages 10 s after a `kill -9` timed out, where single-key reads carried on); a later attempt
/// reads from live replicas. Scanning a range again is harmless: the sink only sets bits.
const SCAN_ATTEMPTS: u32 = 3;
/// Pause before scanning a failed range again.
const SCAN_RETRY_PAUSE: Duration = Duration::from_secs(1);

impl CassandraDatabase {
    /// Calls `sink` with every key of `filter`, `concurrency` token ranges at a time; the count.
    pub(super) async fn scan_all_keys(
        &self,
        filter: &str,
        concurrency: usize,
        sink: KeySink<'_>,
    ) -> Result<u64, DatabaseError> {
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
        if let Some(indexed) = &self.statements.scan_filter_range {
            match self.scan_rows(indexed, (filter, start, end), filter, sink).await {
                Ok(n) => return Ok(n),
                Err(e) => {
                    tracing::warn!(filter, start, end, cause = %e, "scan through the filter index failed; reading the range whole")
                }
            }
        }
        self.scan_rows(&self.statements.scan_range, (start, end), filter, sink).await
    }

    /// Runs a scan whose rows are `(filter, key)`, sending the keys of `filter` to `sink`.
    async fn scan_rows(
        &self,
        scan: &PreparedStatement,
        values: impl scylla::serialize::row::SerializeRow,
        filter: &str,
        sink: &(dyn Fn(&[u8]) + Send + Sync),
    ) -> Result<u64, DatabaseError> {
        let mut rows = self
            .session
            .execute_iter(scan.clone(), values)
            .await
            .map_err(DatabaseError::other)?
            .rows_stream::<(String, Vec<u8>)>()
            .map_err(DatabaseError::other)?;
        let mut n = 0u64;
        while let Some((row_filter, key)) = rows.try_next().await.map_err(DatabaseError::other)? {
            if row_filter == filter {
                sink(&key);
                n += 1;
            }
        }
        Ok(n)
    }
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
