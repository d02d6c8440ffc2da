//! The order of one key's writes and deletes, whichever origins and coordinators carry them.
//!
//! Cassandra keeps, of a key's writes and deletes, the one with the highest timestamp (last
//! write wins; a delete wins a tie). Stamped by each coordinator's clock, a delete through a
//! node whose clock runs ahead would outrank a write acknowledged after it, and hide it: the
//! database would answer "not seen" for an acknowledged key, and the next rebuild would drop
//! its bits.
//!
//! So the origin stamps both itself (`USING TIMESTAMP`): a write with its clock, a delete with
//! its clock less the skew margin `m` (`delete_skew_margin_ms`), less one microsecond more so
//! that no tie can happen. If no two origins' clocks differ by more than `m`, a write that
//! started after a delete was acknowledged outranks it: the delete read its clock D at t0, the
//! write read its clock P at t2 ≥ t0, so the write's stamp P(t2) ≥ D(t2) − m ≥ D(t0) − m,
//! above the delete's D(t0) − m − 1.
//!
//! The price, in the harmless direction: a delete of a key written less than `m` before it (by
//! those clocks) may leave that write in place, and the key "seen".

use std::time::Duration;

/// The timestamp of a write made when the origin's clock read `now_us`.
pub fn write_timestamp(now_us: u64) -> i64 {
    i64::try_from(now_us).unwrap_or(i64::MAX)
}

/// The timestamp of a delete made when the origin's clock read `now_us`, with skew margin
/// `margin`: below every write stamped by a clock at most `margin` behind it, then or later.
pub fn delete_timestamp(now_us: u64, margin: Duration) -> i64 {
    write_timestamp(now_us).saturating_sub(i64::try_from(margin.as_micros()).unwrap_or(i64::MAX)).saturating_sub(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_after_a_delete_outranks_it_while_clocks_differ_by_less_than_the_margin() {
        let margin = Duration::from_millis(500);
        let deleted_at = 1_000_000_000;
        // The writer's clock is up to the margin behind the deleter's, even the same instant.
        for behind in [0, 1, 250_000, 500_000] {
            assert!(write_timestamp(deleted_at - behind) > delete_timestamp(deleted_at, margin), "{behind} µs behind");
        }
        assert!(write_timestamp(deleted_at - 500_001) <= delete_timestamp(deleted_at, margin), "past the margin");
        assert_eq!(delete_timestamp(deleted_at, Duration::ZERO), deleted_at as i64 - 1, "no tie, even with no margin");
        assert_eq!(delete_timestamp(3, margin), -499_998, "before the epoch is still an order");
    }
}
