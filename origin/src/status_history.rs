//! What the status page plots: per filter, one sample per recovery check (every
//! `recovery_interval_ms`), the last [`SAMPLES_KEPT`] of them, in this process. Counters are
//! cumulative (this origin's since it started); the page turns them into rates.

use crate::metrics::FilterGauges;
use serde::Serialize;
use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;

/// Samples kept per filter: an hour at the default 5 s check interval.
pub const SAMPLES_KEPT: usize = 720;

/// One recovery check's view of a filter.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Sample {
    /// When, ms since the Unix epoch.
    pub at_ms: u64,
    /// Fill, keys and false-positive rates, as exported to Prometheus.
    #[serde(flatten)]
    pub health: FilterGauges,
    /// Lookups the filter answered "no" (database reads saved), cumulative.
    pub answered_by_filter: u64,
    /// Lookups the filter answered "maybe" (read from the database), cumulative.
    pub filter_maybes: u64,
    /// Of those, absent keys, cumulative.
    pub false_positives: u64,
    /// A running rebuild: keys scanned and expected (0 when unknown).
    pub rebuild: Option<RebuildSample>,
}

/// A running rebuild's progress in a sample.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct RebuildSample {
    /// What it is doing.
    pub phase: crate::build_progress::BuildPhase,
    /// Keys read so far.
    pub keys_scanned: u64,
    /// Keys expected; 0 when unknown.
    pub keys_expected: u64,
}

/// Every filter's recent samples.
#[derive(Default)]
pub struct StatusHistory {
    filters: Mutex<BTreeMap<String, VecDeque<Sample>>>,
}

impl StatusHistory {
    /// Adds a sample, dropping the oldest beyond [`SAMPLES_KEPT`].
    pub fn record(&self, filter: &str, sample: Sample) {
        let mut filters = self.filters.lock().unwrap_or_else(|e| e.into_inner());
        let samples = filters.entry(filter.to_owned()).or_default();
        if samples.len() == SAMPLES_KEPT {
            samples.pop_front();
        }
        samples.push_back(sample);
    }

    /// Forgets a filter (deleted).
    pub fn forget(&self, filter: &str) {
        self.filters.lock().unwrap_or_else(|e| e.into_inner()).remove(filter);
    }

    /// Every filter's samples, oldest first.
    pub fn snapshot(&self) -> BTreeMap<String, Vec<Sample>> {
        let filters = self.filters.lock().unwrap_or_else(|e| e.into_inner());
        filters.iter().map(|(name, samples)| (name.clone(), samples.iter().copied().collect())).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(at_ms: u64) -> Sample {
        Sample {
            at_ms,
            health: FilterGauges::default(),
            answered_by_filter: at_ms,
            filter_maybes: 0,
            false_positives: 0,
            rebuild: None,
        }
    }

    #[test]
    fn a_sample_is_flat_json_with_the_names_the_page_reads() {
        let json = serde_json::to_value(sample(7)).unwrap();
        for field in [
            "at_ms",
            "fill_ratio",
            "estimated_keys",
            "capacity",
            "target_fp_rate",
            "expected_fp_rate",
            "observed_fp_rate",
            "answered_by_filter",
            "filter_maybes",
            "rebuild",
        ] {
            assert!(json.get(field).is_some(), "{field} missing from {json}");
        }
        assert!(json.get("health").is_none(), "flattened: {json}");
    }

    #[test]
    fn keeps_the_latest_samples_per_filter_oldest_first() {
        let h = StatusHistory::default();
        for t in 0..(SAMPLES_KEPT as u64 + 5) {
            h.record("a", sample(t));
        }
        h.record("b", sample(1));
        let s = h.snapshot();
        assert_eq!(s["a"].len(), SAMPLES_KEPT);
        assert_eq!(s["a"][0].at_ms, 5);
        assert_eq!(s["a"].last().unwrap().at_ms, SAMPLES_KEPT as u64 + 4);
        assert_eq!(s["b"].len(), 1);
        h.forget("a");
        assert!(!h.snapshot().contains_key("a"));
    }
}
