//! Prometheus metrics with `prometheus-client`: one registry, labels as enums (a misspelt
//! label cannot exist), rendered in the OpenMetrics text format at `GET /metrics`.
//!
//! What operators alert on: requests by route and status and those in flight; lookups by who
//! answered (the offload share is `lookups_total{answered_by="filter"}` over all); why the
//! filter could not answer; Redis and Cassandra latency; per filter its fill ratio, expected and
//! observed false-positive rates and a rebuild's phase and progress (set by every recovery
//! check); `build_info`. `deploy/prometheus/` has the alert rules and `deploy/grafana/` the
//! dashboard built on these names.

use crate::build_progress::BuildPhase;
use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::Registry;
use std::fmt::Write as _;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Upper bounds of the latency histograms, in seconds.
const LATENCY_BUCKETS: [f64; 12] = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 2.5];

/// Declares a label-value enum: its variants and the text each is exported as.
macro_rules! label_enum {
    ($(#[$doc:meta])* $name:ident { $($(#[$vdoc:meta])* $variant:ident => $text:literal),+ $(,)? }) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
        pub enum $name { $($(#[$vdoc])* $variant),+ }

        impl $name {
            /// Every value, in order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The text the label carries.
            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text),+ }
            }
        }

        impl EncodeLabelValue for $name {
            fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
                encoder.write_str(self.as_str())
            }
        }
    };
}

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
    /// What an edge fetched.
    EdgeKind {
        /// A manifest.
        Manifest => "manifest",
        /// A segment.
        Segment => "segment",
        /// A journal chunk.
        Journal => "journal",
    }
);

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

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AnsweredByLabels {
    answered_by: AnsweredByLabel,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: Fallthrough,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EdgeLabels {
    kind: EdgeKind,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StoreLabels {
    store: Store,
}

/// A filter's name as a label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FilterLabels {
    filter: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PhaseLabels {
    filter: String,
    phase: BuildPhase,
}

/// An HTTP request's route (the router's pattern, never the raw path: bounded cardinality)
/// and status.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// Method (`OTHER` for a non-standard one).
    pub method: &'static str,
    /// Route pattern, e.g. `/v1/filters/{filter}/keys/{key}`; `unmatched` for none. Static:
    /// labels are built on every request, and the patterns are few (see `request_metrics`).
    pub route: &'static str,
    /// Status code.
    pub status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    version: String,
}

type FloatGauge = Gauge<f64, AtomicU64>;

/// Series every lookup touches, taken from their families once (clones share the value).
#[derive(Clone, Default)]
struct HotSeries {
    answered_by_filter: Counter,
    answered_by_database: Counter,
    // Options only because a histogram has no default (its buckets are chosen); always Some
    // once `Metrics::new` returns.
    redis_seconds: Option<Histogram>,
    local_copy_seconds: Option<Histogram>,
    database_seconds: Option<Histogram>,
    /// Indexed by `CopyLookup::ALL`'s order.
    copy_lookups: Vec<Counter>,
}

fn latency_histogram() -> Histogram {
    Histogram::new(LATENCY_BUCKETS)
}

/// Per-filter counters, the source of the observed false-positive ratio in stats. The counters
/// are the exported ones (clones share the value).
pub struct FilterCounters {
    /// Lookups the filter answered "no".
    pub filter_negatives: Counter,
    /// Lookups the filter answered "maybe".
    pub filter_maybes: Counter,
    /// "Maybe" answers the database then answered "absent".
    pub false_positives: Counter,
    /// Keys deleted through this origin (cumulative). Deletes since the build, from every
    /// origin, are counted in the filter store (`FilterStore::deletes`).
    pub deletes: Counter,
    baseline: Mutex<Baseline>,
}

/// Counter values when the filter's current bits were built: "since the build" is the
/// difference.
#[derive(Clone, Copy, Debug, Default)]
pub struct Baseline {
    /// Filter "no" answers then.
    pub negatives: u64,
    /// False positives then.
    pub false_positives: u64,
}

impl FilterCounters {
    /// The counters as of the last build.
    pub fn build_baseline(&self) -> Baseline {
        *self.baseline.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records that a build starts now: later counts are "since the build".
    pub fn mark_build(&self) {
        let now = Baseline { negatives: self.filter_negatives.get(), false_positives: self.false_positives.get() };
        *self.baseline.lock().unwrap_or_else(|e| e.into_inner()) = now;
    }
}

/// A filter's health as the recovery check last saw it: exported as gauges, and sampled for
/// the status page.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize)]
pub struct FilterGauges {
    /// Share of bits set (sampled).
    pub fill_ratio: f64,
    /// Keys estimated from it.
    pub estimated_keys: f64,
    /// Configured capacity.
    pub capacity: u64,
    /// Target false-positive rate.
    pub target_fp_rate: f64,
    /// False-positive rate the fill implies now.
    pub expected_fp_rate: f64,
    /// False positives among lookups of absent keys since the build, if any were seen.
    pub observed_fp_rate: Option<f64>,
}

/// A running rebuild's progress: exported as gauges.
#[derive(Clone, Copy, Debug)]
pub struct RebuildGauges {
    /// Its phase.
    pub phase: BuildPhase,
    /// Keys read so far.
    pub keys_scanned: u64,
    /// Keys expected (from the old generation's fill), if known.
    pub keys_expected: Option<u64>,
}

/// All of the origin's metrics.
pub struct Metrics {
    registry: Registry,
    lookups: Family<AnsweredByLabels, Counter>,
    /// The lookup path's series, held directly: no family lookup (lock, hash) per lookup.
    hot: HotSeries,
    fallthroughs: Family<ReasonLabels, Counter>,
    edge_requests: Family<EdgeLabels, Counter>,
    /// Database reads made for lookups.
    pub database_reads: Counter,
    /// Lookups that failed because the database failed.
    pub database_errors: Counter,
    /// Requests refused with 429.
    pub overloaded: Counter,
    /// Keys written (acknowledged).
    pub writes: Counter,
    /// Writes refused because the filter could not record the key.
    pub write_filter_failures: Counter,
    /// Writes failed at the database after the filter add.
    pub write_database_failures: Counter,
    lookup_latency: Histogram,
    batch_latency: Histogram,
    store_latency: Family<StoreLabels, Histogram, fn() -> Histogram>,
    requests: Family<RequestLabels, Counter>,
    request_latency: Family<RequestLabels, Histogram, fn() -> Histogram>,
    /// HTTP requests being handled.
    pub in_flight: Gauge,
    filter_negatives: Family<FilterLabels, Counter>,
    filter_maybes: Family<FilterLabels, Counter>,
    false_positives: Family<FilterLabels, Counter>,
    deletes: Family<FilterLabels, Counter>,
    fill_ratio: Family<FilterLabels, FloatGauge>,
    estimated_keys: Family<FilterLabels, FloatGauge>,
    capacity: Family<FilterLabels, Gauge>,
    target_fp_rate: Family<FilterLabels, FloatGauge>,
    expected_fp_rate: Family<FilterLabels, FloatGauge>,
    observed_fp_rate: Family<FilterLabels, FloatGauge>,
    rebuild_running: Family<FilterLabels, Gauge>,
    rebuild_phase: Family<PhaseLabels, Gauge>,
    rebuild_keys_scanned: Family<FilterLabels, Gauge>,
    rebuild_keys_expected: Family<FilterLabels, Gauge>,
    copy_lookups: Family<CopyLookupLabels, Counter>,
    copy_loads: Family<CopyLoadLabels, Counter>,
    copy_rounds: Family<CopyRoundLabels, Counter>,
    copy_bytes: Gauge,
    filters: Mutex<std::collections::HashMap<String, Arc<FilterCounters>>>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    /// Every metric, registered under `bloomgate_`.
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("bloomgate");
        let m = Metrics {
            lookups: Family::default(),
            hot: HotSeries::default(),
            fallthroughs: Family::default(),
            edge_requests: Family::default(),
            database_reads: Counter::default(),
            database_errors: Counter::default(),
            overloaded: Counter::default(),
            writes: Counter::default(),
            write_filter_failures: Counter::default(),
            write_database_failures: Counter::default(),
            lookup_latency: latency_histogram(),
            batch_latency: latency_histogram(),
            store_latency: Family::new_with_constructor(latency_histogram),
            requests: Family::default(),
            request_latency: Family::new_with_constructor(latency_histogram),
            in_flight: Gauge::default(),
            filter_negatives: Family::default(),
            filter_maybes: Family::default(),
            false_positives: Family::default(),
            deletes: Family::default(),
            fill_ratio: Family::default(),
            estimated_keys: Family::default(),
            capacity: Family::default(),
            target_fp_rate: Family::default(),
            expected_fp_rate: Family::default(),
            observed_fp_rate: Family::default(),
            rebuild_running: Family::default(),
            rebuild_phase: Family::default(),
            rebuild_keys_scanned: Family::default(),
            rebuild_keys_expected: Family::default(),
            copy_lookups: Family::default(),
            copy_loads: Family::default(),
            copy_rounds: Family::default(),
            copy_bytes: Gauge::default(),
            filters: Mutex::default(),
            registry: Registry::default(),
        };
        let r = &mut registry;
        r.register("lookups", "Key lookups by who answered (single and batch).", m.lookups.clone());
        r.register("filter_fallthroughs", "Lookups the filter could not answer, by reason.", m.fallthroughs.clone());
        r.register("edge_requests", "Manifests, segments and journal chunks served to edges.", m.edge_requests.clone());
        r.register("database_reads", "Database reads made for lookups.", m.database_reads.clone());
        r.register("database_errors", "Lookups failed (503) because the database failed.", m.database_errors.clone());
        r.register("overloaded", "Requests refused with 429 (max_in_flight).", m.overloaded.clone());
        r.register("writes", "Keys written and acknowledged.", m.writes.clone());
        r.register(
            "write_filter_failures",
            "Writes refused because the filter add failed.",
            m.write_filter_failures.clone(),
        );
        r.register(
            "write_database_failures",
            "Writes failed at the database after the filter add.",
            m.write_database_failures.clone(),
        );
        r.register("lookup_seconds", "Single-key lookup latency, seconds.", m.lookup_latency.clone());
        r.register("batch_lookup_seconds", "Batch lookup latency (a whole batch), seconds.", m.batch_latency.clone());
        r.register(
            "store_seconds",
            "Latency of filter reads (Redis, or a local copy's read barrier) and database reads, seconds.",
            m.store_latency.clone(),
        );
        r.register("http_requests", "HTTP requests by method, route and status.", m.requests.clone());
        r.register(
            "http_request_seconds",
            "HTTP request latency by method, route and status, seconds.",
            m.request_latency.clone(),
        );
        r.register("http_in_flight", "HTTP requests being handled.", m.in_flight.clone());
        r.register("filter_negatives", "Lookups the filter answered 'no', by filter.", m.filter_negatives.clone());
        r.register("filter_maybes", "Lookups the filter answered 'maybe', by filter.", m.filter_maybes.clone());
        r.register(
            "false_positives",
            "'Maybe' answers the database answered 'absent', by filter.",
            m.false_positives.clone(),
        );
        r.register(
            "deletes",
            "Keys deleted through this origin (their bits stay set until a rebuild).",
            m.deletes.clone(),
        );
        r.register("filter_fill_ratio", "Share of the filter's bits set (sampled).", m.fill_ratio.clone());
        r.register("filter_estimated_keys", "Keys estimated from the fill ratio.", m.estimated_keys.clone());
        r.register("filter_capacity_keys", "The filter's configured capacity.", m.capacity.clone());
        r.register("filter_target_fp_rate", "The filter's target false-positive rate.", m.target_fp_rate.clone());
        r.register(
            "filter_expected_fp_rate",
            "False-positive rate the filter's fill implies now.",
            m.expected_fp_rate.clone(),
        );
        r.register(
            "filter_observed_fp_rate",
            "False positives among lookups of absent keys since the build (this origin's).",
            m.observed_fp_rate.clone(),
        );
        r.register("rebuild_running", "1 while a rebuild of the filter runs anywhere.", m.rebuild_running.clone());
        r.register("rebuild_phase", "1 for the running rebuild's phase.", m.rebuild_phase.clone());
        r.register("rebuild_keys_scanned", "Keys the running rebuild has read.", m.rebuild_keys_scanned.clone());
        r.register(
            "rebuild_keys_expected",
            "Keys the running rebuild expects (from the old generation's fill); 0 when unknown.",
            m.rebuild_keys_expected.clone(),
        );
        r.register(
            "local_copy_lookups",
            "Lookups offered to this origin's local copy of the filter, by outcome.",
            m.copy_lookups.clone(),
        );
        r.register("local_copy_loads", "Local copies loaded, by result.", m.copy_loads.clone());
        r.register(
            "local_copy_rounds",
            "Read-barrier catch-up rounds of the local copies (lookups answered per round = the amortisation).",
            m.copy_rounds.clone(),
        );
        r.register("local_copy_bytes", "Bytes of filter bits held in local copies.", m.copy_bytes.clone());
        r.register(
            "build",
            "The running binary.",
            Info::new(BuildLabels { version: env!("CARGO_PKG_VERSION").to_owned() }),
        );
        // Every labelled series exists from the start, at zero: a rate over a series that
        // appears only with its first event would miss that event, and dashboards show 0.
        for by in ORIGIN_ANSWERERS {
            let _ = m.lookups.get_or_create(&AnsweredByLabels { answered_by: AnsweredByLabel(by) });
        }
        for reason in Fallthrough::ALL {
            let _ = m.fallthroughs.get_or_create(&ReasonLabels { reason: *reason });
        }
        for kind in EdgeKind::ALL {
            let _ = m.edge_requests.get_or_create(&EdgeLabels { kind: *kind });
        }
        for store in Store::ALL {
            let _ = m.store_latency.get_or_create(&StoreLabels { store: *store });
        }
        for result in CopyLoad::ALL {
            let _ = m.copy_loads.get_or_create(&CopyLoadLabels { result: *result });
        }
        for result in CopyRound::ALL {
            let _ = m.copy_rounds.get_or_create(&CopyRoundLabels { result: *result });
        }
        let hot = HotSeries {
            answered_by_filter: m
                .lookups
                .get_or_create_owned(&AnsweredByLabels { answered_by: AnsweredByLabel(AnsweredBy::Filter) }),
            answered_by_database: m
                .lookups
                .get_or_create_owned(&AnsweredByLabels { answered_by: AnsweredByLabel(AnsweredBy::Database) }),
            redis_seconds: Some(m.store_latency.get_or_create_owned(&StoreLabels { store: Store::Redis })),
            local_copy_seconds: Some(m.store_latency.get_or_create_owned(&StoreLabels { store: Store::LocalCopy })),
            database_seconds: Some(m.store_latency.get_or_create_owned(&StoreLabels { store: Store::Database })),
            copy_lookups: CopyLookup::ALL
                .iter()
                .map(|outcome| m.copy_lookups.get_or_create_owned(&CopyLookupLabels { outcome: *outcome }))
                .collect(),
        };
        Metrics { registry, hot, ..m }
    }

    /// Counts a lookup's answer.
    pub fn answered(&self, by: AnsweredBy) {
        match by {
            AnsweredBy::Filter => self.hot.answered_by_filter.inc(),
            AnsweredBy::Database => self.hot.answered_by_database.inc(),
            other => self.lookups.get_or_create(&AnsweredByLabels { answered_by: AnsweredByLabel(other) }).inc(),
        };
    }

    /// Counts a lookup offered to a local copy.
    pub fn copy_lookup(&self, outcome: CopyLookup) {
        if let Some(counter) = self.hot.copy_lookups.get(outcome as usize) {
            counter.inc();
        }
    }

    /// Counts a local copy's load.
    pub fn copy_load(&self, result: CopyLoad) {
        self.copy_loads.get_or_create(&CopyLoadLabels { result }).inc();
    }

    /// Counts a local copy's catch-up round.
    pub fn copy_round(&self, current: bool) {
        let result = if current { CopyRound::Current } else { CopyRound::Failed };
        self.copy_rounds.get_or_create(&CopyRoundLabels { result }).inc();
    }

    /// Sets the bytes held in local copies.
    pub fn set_copy_bytes(&self, bytes: u64) {
        self.copy_bytes.set(i64::try_from(bytes).unwrap_or(i64::MAX));
    }

    /// Counts a fall-through by its reason.
    pub fn fallthrough(&self, reason: Fallthrough) {
        self.fallthroughs.get_or_create(&ReasonLabels { reason }).inc();
    }

    /// Counts something served to an edge.
    pub fn edge(&self, kind: EdgeKind) {
        self.edge_requests.get_or_create(&EdgeLabels { kind }).inc();
    }

    /// Records a single-key lookup's latency.
    pub fn observe_lookup(&self, elapsed: Duration) {
        self.lookup_latency.observe(elapsed.as_secs_f64());
    }

    /// Records a batch lookup's latency.
    pub fn observe_batch(&self, elapsed: Duration) {
        self.batch_latency.observe(elapsed.as_secs_f64());
    }

    /// Records a call to a store.
    pub fn observe_store(&self, store: Store, elapsed: Duration) {
        let series = match store {
            Store::Redis => &self.hot.redis_seconds,
            Store::LocalCopy => &self.hot.local_copy_seconds,
            Store::Database => &self.hot.database_seconds,
        };
        if let Some(h) = series {
            h.observe(elapsed.as_secs_f64());
        }
    }

    /// Records a finished HTTP request.
    pub fn observe_request(&self, labels: &RequestLabels, elapsed: Duration) {
        self.requests.get_or_create(labels).inc();
        self.request_latency.get_or_create(labels).observe(elapsed.as_secs_f64());
    }

    /// Counters of one filter, created on first use.
    pub fn filter(&self, name: &str) -> Arc<FilterCounters> {
        let mut filters = self.filters.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = filters.get(name) {
            return c.clone();
        }
        let label = FilterLabels { filter: name.to_owned() };
        let c = Arc::new(FilterCounters {
            filter_negatives: self.filter_negatives.get_or_create_owned(&label),
            filter_maybes: self.filter_maybes.get_or_create_owned(&label),
            false_positives: self.false_positives.get_or_create_owned(&label),
            deletes: self.deletes.get_or_create_owned(&label),
            baseline: Mutex::default(),
        });
        filters.insert(name.to_owned(), c.clone());
        c
    }

    /// Exports what the recovery check saw of a filter.
    pub fn set_filter_gauges(&self, name: &str, g: &FilterGauges) {
        let l = FilterLabels { filter: name.to_owned() };
        self.fill_ratio.get_or_create(&l).set(g.fill_ratio);
        self.estimated_keys.get_or_create(&l).set(g.estimated_keys);
        self.capacity.get_or_create(&l).set(i64::try_from(g.capacity).unwrap_or(i64::MAX));
        self.target_fp_rate.get_or_create(&l).set(g.target_fp_rate);
        self.expected_fp_rate.get_or_create(&l).set(g.expected_fp_rate);
        match g.observed_fp_rate {
            Some(rate) => {
                self.observed_fp_rate.get_or_create(&l).set(rate);
            }
            None => {
                self.observed_fp_rate.remove(&l);
            }
        }
    }

    /// Exports a filter's running rebuild, or that none runs.
    pub fn set_rebuild(&self, name: &str, rebuild: Option<RebuildGauges>) {
        let l = FilterLabels { filter: name.to_owned() };
        self.rebuild_running.get_or_create(&l).set(i64::from(rebuild.is_some()));
        for phase in BuildPhase::ALL {
            let running = rebuild.is_some_and(|r| r.phase == phase);
            self.rebuild_phase.get_or_create(&PhaseLabels { filter: name.to_owned(), phase }).set(i64::from(running));
        }
        let scanned = rebuild.map_or(0, |r| r.keys_scanned);
        self.rebuild_keys_scanned.get_or_create(&l).set(i64::try_from(scanned).unwrap_or(i64::MAX));
        // 0 when unknown (no rebuild, or no old generation to estimate from): a series that
        // came and went would leave dashboards without a name to query.
        let expected = rebuild.and_then(|r| r.keys_expected).unwrap_or(0);
        self.rebuild_keys_expected.get_or_create(&l).set(i64::try_from(expected).unwrap_or(i64::MAX));
    }

    /// The OpenMetrics text exposition (content type [`CONTENT_TYPE`]).
    pub fn render(&self) -> String {
        let mut out = String::with_capacity(8192);
        if prometheus_client::encoding::text::encode(&mut out, &self.registry).is_err() {
            let _ = writeln!(out, "# metrics could not be encoded");
        }
        out
    }
}

/// What `GET /metrics` answers with.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters_labels_and_cumulative_buckets() {
        let m = Metrics::new();
        for _ in 0..3 {
            m.answered(AnsweredBy::Filter);
        }
        m.fallthrough(Fallthrough::SegmentMissing);
        m.filter("hashes").false_positives.inc_by(2);
        m.observe_lookup(Duration::from_micros(50));
        m.observe_lookup(Duration::from_millis(3));
        for _ in 0..4 {
            m.edge(EdgeKind::Segment);
        }
        m.observe_store(Store::Redis, Duration::from_micros(300));
        let labels = RequestLabels { method: "GET", route: "/v1/filters/{filter}/keys/{key}", status: 404 };
        m.observe_request(&labels, Duration::from_millis(1));
        let text = m.render();
        for line in [
            "bloomgate_edge_requests_total{kind=\"segment\"} 4",
            "bloomgate_edge_requests_total{kind=\"manifest\"} 0",
            "bloomgate_filter_fallthroughs_total{reason=\"timeout\"} 0",
            "bloomgate_lookups_total{answered_by=\"filter\"} 3",
            "bloomgate_filter_fallthroughs_total{reason=\"segment_missing\"} 1",
            "bloomgate_false_positives_total{filter=\"hashes\"} 2",
            "bloomgate_lookup_seconds_bucket{le=\"0.0001\"} 1",
            "bloomgate_lookup_seconds_bucket{le=\"0.005\"} 2",
            "bloomgate_lookup_seconds_count 2",
            "bloomgate_store_seconds_count{store=\"redis\"} 1",
            "bloomgate_http_requests_total{method=\"GET\",route=\"/v1/filters/{filter}/keys/{key}\",status=\"404\"} 1",
            "bloomgate_build_info{version=\"",
            "# EOF",
        ] {
            assert!(text.contains(line), "{line:?} missing from\n{text}");
        }
        assert_eq!(m.filter("hashes").false_positives.get(), 2, "the stats read the exported counter");
        assert!(text.contains("bloomgate_lookups_total{answered_by=\"database\"} 0"), "{text}");
        assert!(!text.contains("answered_by=\"edge\""), "an origin never answers for the edge");
    }

    #[test]
    fn gauges_follow_the_recovery_check_and_a_rebuild() {
        let m = Metrics::new();
        let g = FilterGauges {
            fill_ratio: 0.5,
            estimated_keys: 1000.0,
            capacity: 2000,
            target_fp_rate: 0.01,
            expected_fp_rate: 0.002,
            observed_fp_rate: Some(0.003),
        };
        m.set_filter_gauges("f", &g);
        let rebuild = RebuildGauges { phase: BuildPhase::Scanning, keys_scanned: 10, keys_expected: Some(99) };
        m.set_rebuild("f", Some(rebuild));
        let text = m.render();
        for line in [
            "bloomgate_filter_fill_ratio{filter=\"f\"} 0.5",
            "bloomgate_filter_observed_fp_rate{filter=\"f\"} 0.003",
            "bloomgate_rebuild_running{filter=\"f\"} 1",
            "bloomgate_rebuild_phase{filter=\"f\",phase=\"scanning\"} 1",
            "bloomgate_rebuild_phase{filter=\"f\",phase=\"uploading\"} 0",
            "bloomgate_rebuild_keys_expected{filter=\"f\"} 99",
        ] {
            assert!(text.contains(line), "{line:?} missing from\n{text}");
        }
        m.set_filter_gauges("f", &FilterGauges { observed_fp_rate: None, ..g });
        m.set_rebuild("f", None);
        let text = m.render();
        assert!(!text.contains("bloomgate_filter_observed_fp_rate{"), "no lookups, no rate:\n{text}");
        assert!(text.contains("bloomgate_rebuild_running{filter=\"f\"} 0"));
        assert!(text.contains("bloomgate_rebuild_keys_expected{filter=\"f\"} 0"), "0 when none runs:\n{text}");
    }
}
