//! The log of recent writes: every key a write stores, logged beside its row before the write
//! is acknowledged, by the origin's clock, so that recovery can add the writes made since a
//! checkpoint without scanning every key (see docs/design.md, "Recovery without a full
//! scan"). Done by every origin once the cluster is at version 2 (`cluster_version`).
//!
//! A row is `((filter, bucket), written_at, key)`: a filter's writes of one
//! [`BUCKET_MS`]-long stretch of time in one partition, so a replay reads the buckets of its
//! window and nothing else, and rows expire after [`RETAINED`] (the table's TTL). Versioned from
//! its first day: each row carries [`RECENT_WRITE_FORMAT`]. Pure: the Cassandra table stores
//! what this module decides.

use std::time::Duration;

/// The format of the rows this build writes, and the newest it reads.
pub const RECENT_WRITE_FORMAT: i32 = 1;

/// The stretch of time one partition of a filter's log holds.
pub const BUCKET_MS: u64 = 10_000;

/// How long a row is kept (the table's `default_time_to_live`): far beyond the interval
/// between checkpoints, so that the writes since the newest one are all still there.
pub const RETAINED: Duration = Duration::from_secs(3600);

/// The bucket a write logged at `written_at_ms` (ms since the epoch) belongs to.
pub fn bucket_of(written_at_ms: u64) -> i64 {
    (written_at_ms / BUCKET_MS) as i64
}

/// Every bucket that may hold a write logged from `from_ms` to `to_ms`, oldest first.
pub fn buckets_between(from_ms: u64, to_ms: u64) -> std::ops::RangeInclusive<i64> {
    bucket_of(from_ms)..=bucket_of(to_ms.max(from_ms))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_reads_every_bucket_that_can_hold_its_writes_and_no_other() {
        assert_eq!(bucket_of(0), 0);
        assert_eq!(bucket_of(BUCKET_MS - 1), 0);
        assert_eq!(bucket_of(BUCKET_MS), 1);
        assert_eq!(buckets_between(9_999, 10_000), 0..=1);
        assert_eq!(buckets_between(25_000, 25_001), 2..=2);
        assert_eq!(buckets_between(30_000, 10_000), 3..=3, "an empty window reads its start's bucket");
    }

    #[test]
    fn rows_outlive_many_buckets() {
        assert!(RETAINED.as_millis() as u64 >= 100 * BUCKET_MS);
    }
}
