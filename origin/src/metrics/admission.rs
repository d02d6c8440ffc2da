//! Admission: the requests refused with 429 by class (the autoscaling signal: the recording
//! rule `bloomgate:overloaded_per_pod:rate1m` sums them per pod), the caps in force by kind of
//! request, and the memory budget they were derived from, by part.

use super::{row, Row};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

label_enum! {
    /// The classes of requests with limits of their own, so one cannot shed the other.
    Class {
        /// Single-key lookups (`GET`/`HEAD /v1/filters/{f}/keys/{key}`).
        Lookup => "lookup",
        /// Everything else of the API: batches, writes, filters, the edge's feed.
        WriteOrBatch => "write_or_batch",
    }
}

label_enum! {
    /// The kinds of requests whose worst-case memory was measured.
    Kind {
        /// A single-key lookup.
        Lookup => "lookup",
        /// A batch lookup.
        BatchLookup => "batch_lookup",
        /// A single-key write or delete (and the filters' own requests).
        Write => "write",
        /// A batch write.
        BatchWrite => "batch_write",
        /// The edge's feed: a manifest, a journal chunk, a segment.
        EdgeFeed => "edge_feed",
    }
}

label_enum! {
    /// The parts the memory budget is divided into.
    BudgetPart {
        /// The whole budget.
        Total => "total",
        /// The process itself: code, runtime, store clients, caches.
        Floor => "floor",
        /// Filter bits held in local copies.
        LocalCopies => "local_copies",
        /// Open connections' buffers.
        Connections => "connections",
        /// Single-key lookups in flight.
        Lookups => "lookups",
        /// Writes and batches in flight.
        WritesAndBatches => "writes_and_batches",
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ClassLabels {
    class: Class,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    kind: Kind,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PartLabels {
    part: BudgetPart,
}

/// The admission metrics.
pub struct AdmissionMetrics {
    overloaded: Family<ClassLabels, Counter>,
    caps: Family<KindLabels, Gauge>,
    budget: Family<PartLabels, Gauge>,
}

impl AdmissionMetrics {
    pub(super) fn new() -> AdmissionMetrics {
        let m = AdmissionMetrics { overloaded: Family::default(), caps: Family::default(), budget: Family::default() };
        for class in Class::ALL {
            let _ = m.overloaded.get_or_create(&ClassLabels { class: *class });
        }
        m
    }

    pub(super) fn rows(&self) -> Vec<Row> {
        vec![
            row(
                "overloaded",
                "Requests refused with 429 because their class's in-flight cap was full, by class.",
                &self.overloaded,
            ),
            row(
                "in_flight_cap",
                "Requests of each kind that may be in flight at once (alone in their class), derived from the memory budget or max_in_flight.",
                &self.caps,
            ),
            row("memory_budget_bytes", "The memory budget the caps were derived from, by part.", &self.budget),
        ]
    }

    /// A request of `class` refused.
    pub fn refused(&self, class: Class) {
        self.overloaded.get_or_create(&ClassLabels { class }).inc();
    }

    /// Requests of `class` refused so far.
    pub fn refused_so_far(&self, class: Class) -> u64 {
        self.overloaded.get_or_create(&ClassLabels { class }).get()
    }

    /// The cap in force for `kind`.
    pub fn set_cap(&self, kind: Kind, cap: u64) {
        self.caps.get_or_create(&KindLabels { kind }).set(i64::try_from(cap).unwrap_or(i64::MAX));
    }

    /// One part of the budget, in bytes.
    pub fn set_budget(&self, part: BudgetPart, bytes: u64) {
        self.budget.get_or_create(&PartLabels { part }).set(i64::try_from(bytes).unwrap_or(i64::MAX));
    }
}
