//! Local copies: lookups offered to them by outcome, loads by result, read-barrier rounds
//! (lookups answered per round is the amortisation), and the bytes held.

use super::StripedCounter;
use super::{row, Row};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

label_enum!(
    /// What a lookup got from this origin's local copy of the filter.
    CopyLookup {
        /// The copy answered, current after its read barrier.
        Answered => "answered",
        /// The barrier's journal read failed: the lookup fell through, as a failed store read does.
        StoreFailed => "store_failed",
        /// The copy could not be caught up (being dropped and loaded again): asked the store.
        Stale => "stale",
        /// No copy held (loading, over the budget, or off): asked the store.
        NotHeld => "not_held",
    }
);

label_enum!(
    /// How loading a local copy ended.
    CopyLoad {
        /// Loaded and held.
        Loaded => "loaded",
        /// The store failed while it was read.
        Failed => "failed",
        /// It did not fit `local_copy_max_bytes` beside the copies held.
        OverBudget => "over_budget",
        /// Stopped midway: its slot went to another generation first.
        Cancelled => "cancelled",
    }
);

label_enum!(
    /// How a local copy's catch-up round ended.
    CopyRound {
        /// The copy reached the journal's head.
        Current => "current",
        /// It did not (the store failed, or the copy is stale).
        Failed => "failed",
    }
);

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CopyLookupLabels {
    outcome: CopyLookup,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CopyLoadLabels {
    result: CopyLoad,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CopyRoundLabels {
    result: CopyRound,
}

/// The local copies' metrics.
pub struct CopyMetrics {
    lookups: Family<CopyLookupLabels, StripedCounter>,
    /// Every lookup touches one of these: taken from the family once, indexed by
    /// `CopyLookup::ALL`'s order (no family lookup per lookup).
    lookup_series: Vec<StripedCounter>,
    loads: Family<CopyLoadLabels, Counter>,
    rounds: Family<CopyRoundLabels, Counter>,
    bytes: Gauge,
}

impl CopyMetrics {
    pub(super) fn new() -> CopyMetrics {
        let lookups: Family<CopyLookupLabels, StripedCounter> = Family::default();
        let (loads, rounds): (Family<CopyLoadLabels, Counter>, Family<CopyRoundLabels, Counter>) = Default::default();
        let lookup_series =
            CopyLookup::ALL.iter().map(|outcome| lookups.get_or_create_owned(&CopyLookupLabels { outcome: *outcome }));
        let lookup_series = lookup_series.collect();
        for result in CopyLoad::ALL {
            let _ = loads.get_or_create(&CopyLoadLabels { result: *result });
        }
        for result in CopyRound::ALL {
            let _ = rounds.get_or_create(&CopyRoundLabels { result: *result });
        }
        CopyMetrics { lookups, lookup_series, loads, rounds, bytes: Gauge::default() }
    }

    pub(super) fn rows(&self) -> Vec<Row> {
        vec![
            row(
                "local_copy_lookups",
                "Lookups offered to this origin's local copy of the filter, by outcome.",
                &self.lookups,
            ),
            row("local_copy_loads", "Local copies loaded, by result.", &self.loads),
            row(
                "local_copy_rounds",
                "Read-barrier catch-up rounds of the local copies (lookups answered per round = the amortisation).",
                &self.rounds,
            ),
            row("local_copy_bytes", "Bytes of filter bits held in local copies.", &self.bytes),
        ]
    }

    /// Counts a lookup offered to a local copy.
    pub fn lookup(&self, outcome: CopyLookup) {
        if let Some(counter) = self.lookup_series.get(outcome as usize) {
            counter.inc();
        }
    }

    /// Counts a local copy's load.
    pub fn load(&self, result: CopyLoad) {
        self.loads.get_or_create(&CopyLoadLabels { result }).inc();
    }

    /// Counts a local copy's catch-up round.
    pub fn round(&self, current: bool) {
        let result = if current { CopyRound::Current } else { CopyRound::Failed };
        self.rounds.get_or_create(&CopyRoundLabels { result }).inc();
    }

    /// Sets the bytes held in local copies.
    pub fn set_bytes(&self, bytes: u64) {
        self.bytes.set(i64::try_from(bytes).unwrap_or(i64::MAX));
    }
}
