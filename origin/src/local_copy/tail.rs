//! Keeping a held copy: the background journal reads ("tailing") that keep a leased copy's
//! lease alive while lookups come, the idle catch-up otherwise, and the copy dropped once stale,
//! replaced or unused.
//!
//! A leased copy is read every `every` (h, `read_lease_tail_ms`) while lookups use it, so its
//! lease, L from the last read's send, stays alive with L − h − (a round trip) to spare. The reads
//! are what keeps most "no" answers free of Redis: a lookup that finds the lease lapsed waits for a
//! barrier round instead (which renews it) and wakes the tail. Unused for [`TAIL_WHILE_USED`], the
//! copy is read only at the idle interval: an idle origin costs Redis one small call per held
//! filter per [`IDLE_CATCH_UP`], a busy one one per h.
//!
//! Safety never depends on these reads: a lease that lapses only costs a round trip.

use super::held::HeldCopy;
use super::{CopyTable, IDLE_CATCH_UP, IDLE_DROP};
use std::sync::Arc;
use std::time::Duration;

/// A leased copy is tailed every h while a lookup used it within this long.
pub const TAIL_WHILE_USED: Duration = Duration::from_secs(2);

/// Keeps `copy` of `filter` current until it is dropped: tailed every `every` while used and
/// leased, caught up every [`IDLE_CATCH_UP`] otherwise.
pub(super) async fn keep(shared: Arc<CopyTable>, filter: String, copy: Arc<HeldCopy>, every: Duration) {
    // Ticks every h from when the last one was due, not h after the last read ended: the reads'
    // own round trips do not stretch the lease's age.
    let mut tail = tokio::time::interval(every);
    tail.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let tailing = copy.leased() && copy.idle_for() < TAIL_WHILE_USED;
        tokio::select! {
            _ = tail.tick(), if tailing => {}
            _ = tokio::time::sleep(IDLE_CATCH_UP), if !tailing => {}
            // A lookup found the lease lapsed: tail again now, not at the idle interval.
            _ = copy.lapsed() => {}
        }
        if copy.is_closed() || !shared.holds(&filter, &copy) || copy.idle_for() > IDLE_DROP {
            return shared.drop_copy(&filter, &copy);
        }
        if copy.leased() && copy.idle_for() < TAIL_WHILE_USED {
            copy.tail().await;
        } else if copy.since_last_round() >= IDLE_CATCH_UP {
            copy.catch_up_idle().await;
        }
    }
}
