//! Read leases: how each lookup's filter read was answered (the copy under its lease, the copy
//! after a barrier round, the copy's bits all set, Redis), leases that had lapsed when a lookup
//! wanted one, the copies' background journal reads, the reads that found this origin's clock
//! behind Redis's (a pause it did not count), and the writes whose wait for the lease outlasted
//! their database write.

use super::StripedCounter;
use super::{row, Row};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use std::time::Duration;

label_enum!(
    /// How a lookup's filter read was answered.
    FilterRead {
        /// "No" from the local copy while its lease held: no Redis call.
        Lease => "lease",
        /// From the local copy after a barrier round that started after the lookup arrived.
        Barrier => "barrier",
        /// "Maybe" from the local copy at once: the key's bits are all set, and bits only get set.
        CopyMaybe => "copy_maybe",
        /// From Redis (no copy held, or the copy could not answer).
        Redis => "redis",
    }
);

label_enum!(
    /// How a copy's background journal read ended.
    TailRead {
        /// It reached the journal's head: the lease is renewed from when it was sent.
        Current => "current",
        /// It did not (the store failed, or the copy is stale).
        Failed => "failed",
    }
);

label_enum!(
    /// A write under a read lease.
    LeaseWait {
        /// Its wait for the lease outlasted its database write.
        Waited => "waited",
        /// The wait had passed by the end of its database write.
        Overlapped => "overlapped",
    }
);

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ViaLabels {
    via: FilterRead,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TailLabels {
    result: TailRead,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WaitLabels {
    outcome: LeaseWait,
}

/// Upper bounds of the writers' wait histogram, seconds.
const WAIT_BUCKETS: [f64; 10] = [0.0005, 0.001, 0.002, 0.005, 0.01, 0.015, 0.02, 0.05, 0.1, 1.0];

/// The read leases' metrics. Every series exists from the start; the lookups' are taken from
/// their family once, indexed by `FilterRead::ALL`'s order (no family lookup per lookup).
pub struct LeaseMetrics {
    reads: Family<ViaLabels, StripedCounter>,
    read_series: Vec<StripedCounter>,
    lapses: Counter,
    clock_behind: Counter,
    tails: Family<TailLabels, Counter>,
    waits: Family<WaitLabels, Counter>,
    wait_seconds: Histogram,
}

impl LeaseMetrics {
    pub(super) fn new() -> LeaseMetrics {
        let reads: Family<ViaLabels, StripedCounter> = Family::default();
        let read_series = FilterRead::ALL.iter().map(|via| reads.get_or_create_owned(&ViaLabels { via: *via }));
        let read_series = read_series.collect();
        let (tails, waits): (Family<TailLabels, Counter>, Family<WaitLabels, Counter>) = Default::default();
        for result in TailRead::ALL {
            let _ = tails.get_or_create(&TailLabels { result: *result });
        }
        for outcome in LeaseWait::ALL {
            let _ = waits.get_or_create(&WaitLabels { outcome: *outcome });
        }
        let wait_seconds = Histogram::new(WAIT_BUCKETS);
        let (lapses, clock_behind) = (Counter::default(), Counter::default());
        LeaseMetrics { reads, read_series, lapses, clock_behind, tails, waits, wait_seconds }
    }

    pub(super) fn rows(&self) -> Vec<Row> {
        vec![
            row(
                "filter_reads",
                "How each lookup's filter read was answered: lease (the local copy, no Redis call), barrier (the copy after a barrier round), copy_maybe (the copy's bits all set), redis.",
                &self.reads,
            ),
            row(
                "local_copy_lease_lapses",
                "Lookups of a key with a bit clear that found their copy's read lease lapsed and waited for a round.",
                &self.lapses,
            ),
            row(
                "local_copy_clock_behind",
                "Journal reads that found this origin's clock behind Redis's since the previous read (a pause of the host it did not count, or a step of Redis's clock): each renewed no read lease.",
                &self.clock_behind,
            ),
            row(
                "local_copy_tail_reads",
                "Background journal reads that keep the local copies' read leases alive, by result.",
                &self.tails,
            ),
            row(
                "write_lease_waits",
                "Writes under a read lease: waited (the lease's wait outlasted the database write) or overlapped.",
                &self.waits,
            ),
            row(
                "write_lease_wait_seconds",
                "How long writes waited for read leases after their database write, seconds.",
                &self.wait_seconds,
            ),
        ]
    }

    /// Counts a lookup's filter read.
    pub fn filter_read(&self, how: FilterRead) {
        if let Some(counter) = self.read_series.get(how as usize) {
            counter.inc();
        }
    }

    /// Counts a lookup that found its copy's lease lapsed.
    pub fn lapse(&self) {
        self.lapses.inc();
    }

    /// Counts a journal read that found this origin's clock behind the store's.
    pub fn clock_behind(&self) {
        self.clock_behind.inc();
    }

    /// Counts a copy's background journal read.
    pub fn tail_read(&self, current: bool) {
        let result = if current { TailRead::Current } else { TailRead::Failed };
        self.tails.get_or_create(&TailLabels { result }).inc();
    }

    /// Counts a write under a lease that waited `waited` after its database write (zero: the wait
    /// had passed by then).
    pub fn write_waited(&self, waited: Duration) {
        let outcome = if waited.is_zero() { LeaseWait::Overlapped } else { LeaseWait::Waited };
        self.waits.get_or_create(&WaitLabels { outcome }).inc();
        if !waited.is_zero() {
            self.wait_seconds.observe(waited.as_secs_f64());
        }
    }
}
