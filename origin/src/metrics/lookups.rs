//! Lookups: who answered (the offload share is `lookups_total{answered_by="filter"}` over
//! all), why the filter could not answer, the database reads they cost, and their latency and
//! the stores'.

use super::striped::{StripedCounter, StripedLatency};
use super::{row, Row};
use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::family::Family;
use std::fmt::Write as _;
use std::time::Duration;

/// Who answered a lookup: the API's one list of answerers (an origin's lookups are answered by
/// its filter or the database; `edge` answers never reach it).
pub use bloomgate_client::api::AnsweredBy;

/// The `answered_by` label: the API's value, as the body and header write it.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
struct AnsweredByLabel(AnsweredBy);

impl EncodeLabelValue for AnsweredByLabel {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        encoder.write_str(self.0.as_str())
    }
}

/// The answerers an origin's lookups can have: their series exist from the start.
const ORIGIN_ANSWERERS: [AnsweredBy; 2] = [AnsweredBy::Filter, AnsweredBy::Database];

label_enum!(
    /// Why a lookup fell through to the database without a filter answer.
    Fallthrough {
        /// The filter store did not answer in time.
        Timeout => "timeout",
        /// The filter store failed.
        Error => "error",
        /// The filter's metadata is gone (flushed, restarted empty).
        MetaMissing => "meta_missing",
        /// The key's segment is gone or damaged.
        SegmentMissing => "segment_missing",
        /// The bits belong to another Redis incarnation (restarted, failed over).
        IncarnationChanged => "incarnation_changed",
        /// The filter's state is in a format newer than this origin reads (a newer origin
        /// wrote it, mid-upgrade): never guessed at.
        UnknownFormat => "unknown_format",
        /// The filter is turned off (`filter_enabled = false`).
        Disabled => "disabled",
    }
);

impl Fallthrough {
    /// Whether the filter's bits are lost or untrusted, so the recovery check should run now.
    pub fn needs_recovery(self) -> bool {
        matches!(self, Fallthrough::MetaMissing | Fallthrough::SegmentMissing | Fallthrough::IncarnationChanged)
    }
}

label_enum!(
    /// The stores behind the origin.
    Store {
        /// Redis: the filter's bits.
        Redis => "redis",
        /// This origin's local copy of the filter's bits: the time is the read barrier's wait.
        LocalCopy => "local_copy",
        /// Cassandra (or the embedded key file): the keys.
        Database => "database",
    }
);

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AnsweredByLabels {
    answered_by: AnsweredByLabel,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: Fallthrough,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StoreLabels {
    store: Store,
}

/// The lookups' metrics.
pub struct LookupMetrics {
    answered: Family<AnsweredByLabels, StripedCounter>,
    fallthroughs: Family<ReasonLabels, StripedCounter>,
    /// Database reads made for lookups.
    pub database_reads: StripedCounter,
    /// Lookups that failed because the database failed.
    pub database_errors: StripedCounter,
    single_latency: StripedLatency,
    batch_latency: StripedLatency,
    store_latency: Family<StoreLabels, StripedLatency>,
    /// The series every lookup touches, taken from their families once (clones share the
    /// value): no family lookup (lock, hash) per lookup.
    answered_by_filter: StripedCounter,
    answered_by_database: StripedCounter,
    redis_seconds: StripedLatency,
    local_copy_seconds: StripedLatency,
    database_seconds: StripedLatency,
    fallthrough_series: Vec<StripedCounter>,
}

impl LookupMetrics {
    pub(super) fn new() -> LookupMetrics {
        let answered: Family<AnsweredByLabels, StripedCounter> = Family::default();
        let fallthroughs: Family<ReasonLabels, StripedCounter> = Family::default();
        let store_latency: Family<StoreLabels, StripedLatency> = Family::default();
        // Every labelled series exists from the start, at zero (see `Metrics::new`).
        for by in ORIGIN_ANSWERERS {
            let _ = answered.get_or_create(&AnsweredByLabels { answered_by: AnsweredByLabel(by) });
        }
        let fallthrough_series =
            Fallthrough::ALL.iter().map(|reason| fallthroughs.get_or_create_owned(&ReasonLabels { reason: *reason }));
        let fallthrough_series = fallthrough_series.collect();
        let by = |by| answered.get_or_create_owned(&AnsweredByLabels { answered_by: AnsweredByLabel(by) });
        let store = |store| store_latency.get_or_create_owned(&StoreLabels { store });
        LookupMetrics {
            answered_by_filter: by(AnsweredBy::Filter),
            answered_by_database: by(AnsweredBy::Database),
            redis_seconds: store(Store::Redis),
            local_copy_seconds: store(Store::LocalCopy),
            database_seconds: store(Store::Database),
            answered,
            fallthroughs,
            fallthrough_series,
            database_reads: StripedCounter::default(),
            database_errors: StripedCounter::default(),
            single_latency: StripedLatency::default(),
            batch_latency: StripedLatency::default(),
            store_latency,
        }
    }

    pub(super) fn rows(&self) -> Vec<Row> {
        vec![
            row("lookups", "Key lookups by who answered (single and batch).", &self.answered),
            row("filter_fallthroughs", "Lookups the filter could not answer, by reason.", &self.fallthroughs),
            row("database_reads", "Database reads made for lookups.", &self.database_reads),
            row("database_errors", "Lookups failed (503) because the database failed.", &self.database_errors),
            row("lookup_seconds", "Single-key lookup latency, seconds.", &self.single_latency),
            row("batch_lookup_seconds", "Batch lookup latency (a whole batch), seconds.", &self.batch_latency),
            row(
                "store_seconds",
                "Latency of filter reads (Redis, or a local copy's read barrier) and database reads, seconds.",
                &self.store_latency,
            ),
        ]
    }

    /// Counts a lookup's answer.
    pub fn answered(&self, by: AnsweredBy) {
        match by {
            AnsweredBy::Filter => self.answered_by_filter.inc(),
            AnsweredBy::Database => self.answered_by_database.inc(),
            other => self.answered.get_or_create(&AnsweredByLabels { answered_by: AnsweredByLabel(other) }).inc(),
        };
    }

    /// Counts a fall-through by its reason.
    pub fn fallthrough(&self, reason: Fallthrough) {
        match self.fallthrough_series.get(reason as usize) {
            Some(series) => series.inc(),
            None => self.fallthroughs.get_or_create(&ReasonLabels { reason }).inc(),
        }
    }

    /// Records a single-key lookup's latency.
    pub fn observe_single(&self, elapsed: Duration) {
        self.single_latency.observe(elapsed);
    }

    /// Records a batch lookup's latency.
    pub fn observe_batch(&self, elapsed: Duration) {
        self.batch_latency.observe(elapsed);
    }

    /// Records a call to a store.
    pub fn observe_store(&self, store: Store, elapsed: Duration) {
        let series = match store {
            Store::Redis => &self.redis_seconds,
            Store::LocalCopy => &self.local_copy_seconds,
            Store::Database => &self.database_seconds,
        };
        series.observe(elapsed);
    }
}
