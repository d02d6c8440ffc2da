//! The order of one key's writes and deletes, whichever origins and coordinators carry them.
//!
//! Cassandra keeps, of a key's writes and deletes, the one with the highest timestamp (last
//! write wins; a delete wins a tie). Stamped by each coordinator's clock, a delete through a
//! node whose clock runs ahead would outrank a write acknowledged after it and hide it; one
//! through a node whose clock runs behind would lose to a write acknowledged before it and
//! delete nothing, though it answers `"deleted": true`.
//!
//! So the origin stamps both itself (`USING TIMESTAMP`), and a delete waits before it is
//! acknowledged (a commit wait). Let `m` (`delete_skew_margin_ms`) bound how far any two
//! origins' clocks differ. A delete reads its clock, `c = D(t0)`, stamps `d = c + m`, and is
//! acknowledged only once its clock reads past `c + 2m`:
//!
//! - **Every write acknowledged before the delete was sent is deleted.** Such a write read its
//!   clock P at some `tw ≤ t0`, so its stamp `P(tw) ≤ D(tw) + m ≤ D(t0) + m = d`, and the
//!   delete wins (a tie included).
//! - **No write sent after the delete's acknowledgement is hidden.** It reads its clock at
//!   `t2` after the acknowledgement, when `D(t2) > c + 2m`, so its stamp
//!   `P(t2) ≥ D(t2) − m > c + m = d`: the write wins.
//!
//! A write concurrent with the delete (neither acknowledged before the other was sent) may go
//! either way, as any two concurrent operations may. The price is the delete's latency, `2m`:
//! deletes are rare next to writes and lookups, and the margin is the clocks' bound, not a
//! guess (keep the origins on NTP, and the margin above their largest difference).

use std::time::Duration;

/// The timestamp of a write made when the origin's clock read `now_us`.
pub fn write_timestamp(now_us: u64) -> i64 {
    i64::try_from(now_us).unwrap_or(i64::MAX)
}

/// How a delete is ordered against every write of its key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeleteOrder {
    /// Its timestamp: at or above every write acknowledged before the delete was sent.
    pub stamp: i64,
    /// The reading of the deleting origin's clock, in µs, past which it may be acknowledged:
    /// every write sent after that then outranks it.
    pub ack_after_us: u64,
}

/// The order of a delete made when the origin's clock read `now_us`, with skew margin `margin`.
pub fn delete_order(now_us: u64, margin: Duration) -> DeleteOrder {
    let m = u64::try_from(margin.as_micros()).unwrap_or(u64::MAX / 4);
    if crate::planted::active(crate::planted::Bug::DeleteStampedBehind) {
        // The rule this module replaced: stamped behind and acknowledged at once, so a write
        // acknowledged less than the margin before the delete outranks it.
        return DeleteOrder { stamp: write_timestamp(now_us.saturating_sub(m + 1)), ack_after_us: now_us };
    }
    DeleteOrder { stamp: write_timestamp(now_us.saturating_add(m)), ack_after_us: now_us.saturating_add(2 * m) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_delete_outranks_every_write_before_it_and_none_after_its_acknowledgement() {
        let margin = Duration::from_millis(500);
        let m = 500_000;
        let deleted_at = 1_000_000_000;
        let order = delete_order(deleted_at, margin);
        // Writes acknowledged before the delete was sent, from clocks up to the margin ahead
        // of the deleter's: the delete outranks them (Cassandra: a delete wins a tie).
        for ahead in [0, 1, 250_000, m] {
            assert!(write_timestamp(deleted_at + ahead) <= order.stamp, "a write {ahead} µs ahead survived");
        }
        assert!(
            write_timestamp(deleted_at + m + 1) > order.stamp,
            "past the margin the bound fails: the margin is the assumption"
        );
        // Writes sent after the acknowledgement (the deleter's clock past ack_after_us), from
        // clocks up to the margin behind: they outrank the delete.
        let acked = order.ack_after_us + 1;
        for behind in [0, 1, 250_000, m] {
            assert!(write_timestamp(acked - behind) > order.stamp, "a write {behind} µs behind was hidden");
        }
        assert_eq!(
            delete_order(deleted_at, Duration::ZERO),
            DeleteOrder { stamp: 1_000_000_000, ack_after_us: 1_000_000_000 }
        );
    }
}
