//! The check of a reader's boot clock against the filter store's clock, between two journal
//! reads: the one pause leases cannot see for themselves.
//!
//! A lease is timed on the boot clock, which counts through what the guest's own kernel does:
//! SIGSTOP, a cgroup freeze, a suspend. A virtual machine paused or live-migrated by its
//! hypervisor is different: every guest clock stops for the pause, so after it the lease still
//! looks fresh though real time went on, and writers acknowledged adds the copy never read.
//!
//! Each complete journal read also returns Redis's clock (`TIME`). Between two reads the store's
//! clock cannot run further than real time allows: the first read reached Redis after it was
//! sent, the second before its answer arrived, so Redis's clock advanced by at most the real
//! time from the first send to the second answer, which this clock measures as at least
//! `(1 − ρ)` of it. Redis's clock advancing more than that (scaled by `(1 + ρ)/(1 − ρ)`, plus a
//! millisecond) says this clock missed time: the read that shows it renews no lease, and the
//! next one, sent after the pause, does. A step of Redis's clock reads the same way and costs one
//! lease, nothing else.
//!
//! What this cannot do: lookups between the end of a pause and the next read still answer under
//! the lease from before the pause (at most `read_lease_tail_ms` plus a round trip, while the copy
//! is in use). Hosts that pause or live-migrate guests should create filters in `barrier` mode
//! (docs/operations.md).

use super::boot_clock::BootInstant;

/// Slack for Redis's clock resolution and the reads' own rounding, in µs.
const SLACK_US: u64 = 1_000;

/// What one complete read told of the store's clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Reading {
    /// When the read was sent, on this origin's boot clock.
    sent: BootInstant,
    /// The store's clock when it read the journal, in µs.
    store_us: u64,
}

/// This clock against the store's, from one complete read to the next.
#[derive(Clone, Copy, Debug, Default)]
pub struct StoreClockCheck {
    last: Option<Reading>,
}

/// The check's verdict on a complete read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClockVerdict {
    /// Nothing against this clock: the read may renew the lease.
    Consistent,
    /// The store's clock ran further than this one allows since the previous read, by this many
    /// µs: this clock missed time (a pause it did not count). The read renews no lease.
    FellBehind(u64),
}

impl StoreClockCheck {
    /// A complete read sent at `sent` whose answer arrived at `received` (this clock), that saw
    /// the store's clock at `store_us` (None: the store does not say, nothing to check); checked
    /// against the previous complete read, with clock rates within `drift_ppm` of real time.
    pub fn observe(
        &mut self,
        sent: BootInstant,
        received: BootInstant,
        store_us: Option<u64>,
        drift_ppm: u32,
    ) -> ClockVerdict {
        let Some(store_us) = store_us else { return ClockVerdict::Consistent };
        let previous = self.last.replace(Reading { sent, store_us });
        let Some(previous) = previous else { return ClockVerdict::Consistent };
        let local_us = received.saturating_since(previous.sent).as_micros() as u64;
        let ppm = u128::from(drift_ppm.min(super::MAX_DRIFT_PPM));
        let allowed = (u128::from(local_us) * (1_000_000 + ppm)).div_ceil(1_000_000 - ppm) as u64 + SLACK_US;
        match store_us.saturating_sub(previous.store_us) {
            ran if ran > allowed => ClockVerdict::FellBehind(ran - allowed),
            _ => ClockVerdict::Consistent,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64) -> BootInstant {
        BootInstant::from_nanos(ms * 1_000_000)
    }

    #[test]
    fn reads_a_tail_interval_apart_are_consistent_and_a_paused_clock_is_caught() {
        let mut check = StoreClockCheck::default();
        let store = |ms: u64| Some(5_000_000_000 + ms * 1_000);
        assert_eq!(
            check.observe(at(100), at(101), store(100), 1_000),
            ClockVerdict::Consistent,
            "the first read: nothing to compare"
        );
        // 4 ms later, the store's clock 4 ms on: consistent.
        assert_eq!(check.observe(at(104), at(105), store(104), 1_000), ClockVerdict::Consistent);
        // The guest was paused 2 s between these reads: its clock says 5 ms, the store's 2.005 s.
        match check.observe(at(108), at(109), store(2_109), 1_000) {
            ClockVerdict::FellBehind(by_us) => assert!((1_990_000..2_000_000).contains(&by_us), "{by_us}"),
            other => panic!("a 2 s pause went unseen: {other:?}"),
        }
        // The next read compares with the one that showed the pause, and is consistent again.
        assert_eq!(check.observe(at(112), at(113), store(2_113), 1_000), ClockVerdict::Consistent);
    }

    #[test]
    fn the_store_clock_may_run_within_the_rate_bound_and_slack() {
        let mut check = StoreClockCheck::default();
        check.observe(at(0), at(1), Some(0), 1_000);
        // 10 s on this clock, send to answer; the store's clock ran 10.011 s: within ρ and slack.
        let (sent, received) = (at(10_000), at(10_000));
        assert_eq!(check.observe(sent, received, Some(10_011_000), 1_000), ClockVerdict::Consistent);
        let mut check = StoreClockCheck::default();
        check.observe(at(0), at(1), Some(0), 1_000);
        assert!(matches!(check.observe(at(10_000), at(10_000), Some(10_022_000), 1_000), ClockVerdict::FellBehind(_)));
        assert_eq!(
            StoreClockCheck::default().observe(at(0), at(0), None, 1_000),
            ClockVerdict::Consistent,
            "a store that does not say its time is not checked"
        );
    }
}
