//! Per filter: the lookup counters stats read (filter "no"s and "maybe"s, false positives,
//! deletes), and the health gauges the recovery check sets (fill, estimated keys, capacity,
//! target, expected and observed false-positive rates).

use super::StripedCounter;
use super::{row, FloatGauge, Row};
use crate::distinct_keys::DistinctKeys;
use crate::read_mostly::ReadMostly;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// A filter's name as a label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct FilterLabels {
    pub filter: String,
}

/// Per-filter counters, the source of the observed false-positive ratio in stats. The counters
/// are the exported ones (clones share the value).
pub struct FilterCounters {
    /// Lookups the filter answered "no".
    pub filter_negatives: StripedCounter,
    /// Lookups the filter answered "maybe".
    pub filter_maybes: StripedCounter,
    /// "Maybe" answers the database then answered "absent".
    pub false_positives: StripedCounter,
    /// Keys deleted through this origin (cumulative). Deletes since the build, from every
    /// origin, are counted in the filter store (`StatsStore::deletes`).
    pub deletes: StripedCounter,
    /// Lookups the local copy answered "no" under its read lease (for stats; not exported per
    /// filter: `filter_reads_total{via="lease"}` counts them all).
    pub lease_answers: StripedCounter,
    /// Distinct keys the filter answered "no" for, or "maybe" and the database "absent", since
    /// the generation `sketched` (the automatic false-positive rebuild's denominator).
    pub absent_keys: DistinctKeys,
    /// Distinct false-positive keys since then (its numerator: repeats count once).
    pub false_positive_keys: DistinctKeys,
    sketched: AtomicU64,
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

    /// Distinct (absent, false-positive) keys looked up since `generation` was found active;
    /// the counts restart (from zero) when another generation is asked about than last time.
    pub fn distinct_since(&self, generation: u64) -> (u64, u64) {
        let before = self.sketched.swap(generation, Ordering::Relaxed);
        if before != 0 && before != generation {
            self.absent_keys.clear();
            self.false_positive_keys.clear();
        }
        (self.absent_keys.estimate(), self.false_positive_keys.estimate())
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

/// The filters' metrics.
#[derive(Default)]
pub struct FilterMetrics {
    negatives: Family<FilterLabels, StripedCounter>,
    maybes: Family<FilterLabels, StripedCounter>,
    false_positives: Family<FilterLabels, StripedCounter>,
    deletes: Family<FilterLabels, StripedCounter>,
    fill_ratio: Family<FilterLabels, FloatGauge>,
    estimated_keys: Family<FilterLabels, FloatGauge>,
    capacity: Family<FilterLabels, Gauge>,
    target_fp_rate: Family<FilterLabels, FloatGauge>,
    expected_fp_rate: Family<FilterLabels, FloatGauge>,
    observed_fp_rate: Family<FilterLabels, FloatGauge>,
    counters: ReadMostly<Arc<FilterCounters>>,
}

impl FilterMetrics {
    pub(super) fn rows(&self) -> Vec<Row> {
        vec![
            row("filter_negatives", "Lookups the filter answered 'no', by filter.", &self.negatives),
            row("filter_maybes", "Lookups the filter answered 'maybe', by filter.", &self.maybes),
            row("false_positives", "'Maybe' answers the database answered 'absent', by filter.", &self.false_positives),
            row("deletes", "Keys deleted through this origin (their bits stay set until a rebuild).", &self.deletes),
            row("filter_fill_ratio", "Share of the filter's bits set (sampled).", &self.fill_ratio),
            row("filter_estimated_keys", "Keys estimated from the fill ratio.", &self.estimated_keys),
            row("filter_capacity_keys", "The filter's configured capacity.", &self.capacity),
            row("filter_target_fp_rate", "The filter's target false-positive rate.", &self.target_fp_rate),
            row(
                "filter_expected_fp_rate",
                "False-positive rate the filter's fill implies now.",
                &self.expected_fp_rate,
            ),
            row(
                "filter_observed_fp_rate",
                "False positives among lookups of absent keys since the build (this origin's).",
                &self.observed_fp_rate,
            ),
        ]
    }

    /// Counters of one filter, created on first use.
    pub fn counters(&self, name: &str) -> Arc<FilterCounters> {
        self.counters.get_or_insert_with(name, || self.new_counters(name))
    }

    /// `read` of the counters of one filter (created on first use), borrowed: what every
    /// lookup counts into, without a lock or a clone of the shared handle.
    pub fn with_counters<R>(&self, name: &str, read: impl FnOnce(&FilterCounters) -> R) -> R {
        self.counters.read_or_insert_with(name, || self.new_counters(name), |c| read(c))
    }

    fn new_counters(&self, name: &str) -> Arc<FilterCounters> {
        let label = FilterLabels { filter: name.to_owned() };
        Arc::new(FilterCounters {
            filter_negatives: self.negatives.get_or_create_owned(&label),
            filter_maybes: self.maybes.get_or_create_owned(&label),
            false_positives: self.false_positives.get_or_create_owned(&label),
            deletes: self.deletes.get_or_create_owned(&label),
            lease_answers: StripedCounter::default(),
            absent_keys: DistinctKeys::default(),
            false_positive_keys: DistinctKeys::default(),
            sketched: AtomicU64::new(0),
            baseline: Mutex::default(),
        })
    }

    /// Exports what the recovery check saw of a filter.
    pub fn set_gauges(&self, name: &str, g: &FilterGauges) {
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
}
