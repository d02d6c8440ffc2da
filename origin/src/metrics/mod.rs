//! Prometheus metrics with `prometheus-client`: one registry, labels as enums (a misspelt
//! label cannot exist), rendered in the OpenMetrics text format at `GET /metrics`.
//!
//! What operators alert on: requests by route and status and those in flight; lookups by who
//! answered (the offload share is `lookups_total{answered_by="filter"}` over all); why the
//! filter could not answer; Redis and Cassandra latency; per filter its fill ratio, expected and
//! observed false-positive rates and a rebuild's phase and progress (set by every recovery
//! check); `build_info`. `deploy/prometheus/` has the alert rules and `deploy/grafana/` the
//! dashboard built on these names.
//!
//! # Layout
//! One file per concern, each with its metrics, their registration table (`rows`) and what its
//! callers record: `lookups` (who answered, fall-throughs, database reads, latency),
//! `edge_feed`, `writes`, `requests` (HTTP), `admission` (429s by class, the caps in force and
//! the memory budget behind them), `filters` (per-filter counters and health gauges),
//! `rebuilds`, `recoveries` (checkpoints, and recoveries by what seeded them), `copies` (local copies), `leases` (read leases: how filter reads were answered,
//! lapses, the background reads, writers' waits); and `process`, the process's own `process_*`
//! metrics, under their standard names.

use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::{Metric, Registry};
use std::fmt::Write as _;
use std::sync::atomic::AtomicU64;

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

        impl prometheus_client::encoding::EncodeLabelValue for $name {
            fn encode(
                &self,
                encoder: &mut prometheus_client::encoding::LabelValueEncoder,
            ) -> Result<(), std::fmt::Error> {
                std::fmt::Write::write_str(encoder, self.as_str())
            }
        }
    };
}

mod admission;
mod copies;
mod edge_feed;
mod filters;
mod leases;
mod lookups;
mod process;
mod rebuilds;
mod recoveries;
mod requests;
mod striped;
mod writes;

pub use admission::{AdmissionMetrics, BudgetPart, Class, Kind};
pub use copies::{CopyLoad, CopyLookup, CopyMetrics, CopyRound};
pub use edge_feed::{EdgeFeedMetrics, EdgeKind};
pub use filters::{Baseline, FilterCounters, FilterGauges, FilterMetrics};
pub use leases::{FilterRead, LeaseMetrics, LeaseWait, TailRead};
pub use lookups::{AnsweredBy, Fallthrough, LookupMetrics, Store};
pub use process::{ProcessCollector, ProcessSample};
pub use rebuilds::{RebuildGauges, RebuildMetrics};
pub use recoveries::{CheckpointResult, RecoveryMetrics, RecoverySource};
pub use requests::{RequestLabels, RequestMetrics, RequestSeries};
pub use striped::{Stripe, StripedCounter, StripedGauge, StripedLatency};
pub use writes::WriteMetrics;

/// Upper bounds of the latency histograms, in seconds.
const LATENCY_BUCKETS: [f64; 12] = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 2.5];

fn latency_histogram() -> Histogram {
    Histogram::new(LATENCY_BUCKETS)
}

type FloatGauge = Gauge<f64, AtomicU64>;

/// One line of a registration table: a metric, its name (after `bloomgate_`) and help.
struct Row(Box<dyn FnOnce(&mut Registry)>);

/// The row registering (a handle to) `metric` as `name` with `help`.
fn row(name: &'static str, help: &'static str, metric: &(impl Metric + Clone)) -> Row {
    let metric = metric.clone();
    Row(Box::new(move |registry| registry.register(name, help, metric)))
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelSet)]
struct BuildLabels {
    version: String,
}

/// All of the origin's metrics, by concern.
pub struct Metrics {
    registry: Registry,
    /// Lookups: who answered, why the filter could not, how long the stores took.
    pub lookups: LookupMetrics,
    /// What the edge's feed served.
    pub edge_feed: EdgeFeedMetrics,
    /// Writes: acknowledged, refused, and the database's time.
    pub writes: WriteMetrics,
    /// HTTP requests.
    pub requests: RequestMetrics,
    /// Admission: 429s, the caps in force, the memory budget.
    pub admission: AdmissionMetrics,
    /// Per filter.
    pub filters: FilterMetrics,
    /// Rebuilds in progress: phase and keys scanned.
    pub rebuilds: RebuildMetrics,
    /// Checkpoints and recoveries.
    pub recoveries: RecoveryMetrics,
    /// Local copies.
    pub copies: CopyMetrics,
    /// Read leases.
    pub leases: LeaseMetrics,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    /// Every metric, registered under `bloomgate_` (the process's own under their standard
    /// names). Every labelled series exists from the start, at zero: a rate over a series that
    /// appears only with its first event would miss that event, and dashboards show 0.
    pub fn new() -> Metrics {
        let mut m = Metrics {
            registry: Registry::default(),
            lookups: LookupMetrics::new(),
            edge_feed: EdgeFeedMetrics::new(),
            writes: WriteMetrics::default(),
            requests: RequestMetrics::new(),
            admission: AdmissionMetrics::new(),
            filters: FilterMetrics::default(),
            rebuilds: RebuildMetrics::default(),
            recoveries: RecoveryMetrics::new(),
            copies: CopyMetrics::new(),
            leases: LeaseMetrics::new(),
        };
        let tables = [
            m.lookups.rows(),
            m.edge_feed.rows(),
            m.writes.rows(),
            m.requests.rows(),
            m.admission.rows(),
            m.filters.rows(),
            m.rebuilds.rows(),
            m.recoveries.rows(),
            m.copies.rows(),
            m.leases.rows(),
        ];
        // The process's own metrics under their standard names; everything else is bloomgate_*.
        m.registry.register_collector(Box::new(ProcessCollector));
        let bloomgate = m.registry.sub_registry_with_prefix("bloomgate");
        for Row(register) in tables.into_iter().flatten() {
            register(bloomgate);
        }
        let build = Info::new(BuildLabels { version: env!("CARGO_PKG_VERSION").to_owned() });
        bloomgate.register("build", "The running binary.", build);
        m
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
    use crate::build_progress::BuildPhase;
    use std::time::Duration;

    #[test]
    fn renders_counters_labels_and_cumulative_buckets() {
        let m = Metrics::new();
        for _ in 0..3 {
            m.lookups.answered(AnsweredBy::Filter);
        }
        m.lookups.fallthrough(Fallthrough::SegmentMissing);
        m.filters.counters("hashes").false_positives.inc_by(2);
        m.lookups.observe_single(Duration::from_micros(50));
        m.lookups.observe_single(Duration::from_millis(3));
        for _ in 0..4 {
            m.edge_feed.served(EdgeKind::Segment);
        }
        m.lookups.observe_store(Store::Redis, Duration::from_micros(300));
        let labels = RequestLabels { method: "GET", route: "/v1/filters/{filter}/keys/{key}", status: 404 };
        m.requests.observe(&labels, Duration::from_millis(1));
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
            "bloomgate_overloaded_total{class=\"lookup\"} 0",
            "process_resident_memory_bytes ",
            "process_cpu_seconds_total ",
            "process_start_time_seconds ",
            "# EOF",
        ] {
            assert!(text.contains(line), "{line:?} missing from\n{text}");
        }
        assert_eq!(m.filters.counters("hashes").false_positives.get(), 2, "the stats read the exported counter");
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
        m.filters.set_gauges("f", &g);
        let rebuild = RebuildGauges { phase: BuildPhase::Scanning, keys_scanned: 10, keys_expected: Some(99) };
        m.rebuilds.set("f", Some(rebuild));
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
        m.filters.set_gauges("f", &FilterGauges { observed_fp_rate: None, ..g });
        m.rebuilds.set("f", None);
        let text = m.render();
        assert!(!text.contains("bloomgate_filter_observed_fp_rate{"), "no lookups, no rate:\n{text}");
        assert!(text.contains("bloomgate_rebuild_running{filter=\"f\"} 0"));
        assert!(text.contains("bloomgate_rebuild_keys_expected{filter=\"f\"} 0"), "0 when none runs:\n{text}");
    }
}
