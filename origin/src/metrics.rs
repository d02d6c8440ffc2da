//! Prometheus metrics, kept as plain atomics (no registry crate: a dozen counters and one
//! histogram do not need one) and rendered in the text exposition format.

use std::collections::HashMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

/// Why a lookup fell through to the key store without a filter answer.
pub const FALLTHROUGH_REASONS: [&str; 6] =
    ["timeout", "error", "meta_missing", "segment_missing", "incarnation_changed", "disabled"];

/// Upper bounds of the latency histogram, in seconds.
const LATENCY_BUCKETS: [f64; 12] = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 2.5];

/// Per-filter counters, the source of the observed false-positive ratio in stats.
#[derive(Default)]
pub struct FilterCounters {
    /// Lookups the filter answered "no".
    pub filter_negatives: AtomicU64,
    /// Lookups the filter answered "maybe".
    pub filter_maybes: AtomicU64,
    /// "Maybe" answers the key store then answered "absent".
    pub false_positives: AtomicU64,
    /// Keys deleted through this origin (cumulative). Deletes since the build, from every
    /// origin, are counted in the filter store (`FilterStore::deletes`).
    pub deletes: AtomicU64,
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
        let now = Baseline {
            negatives: self.filter_negatives.load(Relaxed),
            false_positives: self.false_positives.load(Relaxed),
        };
        *self.baseline.lock().unwrap_or_else(|e| e.into_inner()) = now;
    }
}

/// A histogram with fixed buckets.
#[derive(Default)]
pub struct Histogram {
    buckets: [AtomicU64; LATENCY_BUCKETS.len()],
    count: AtomicU64,
    sum_micros: AtomicU64,
}

impl Histogram {
    /// Records one observation.
    pub fn observe(&self, elapsed: Duration) {
        let secs = elapsed.as_secs_f64();
        if let Some(i) = LATENCY_BUCKETS.iter().position(|b| secs <= *b) {
            self.buckets[i].fetch_add(1, Relaxed);
        }
        self.count.fetch_add(1, Relaxed);
        self.sum_micros.fetch_add(elapsed.as_micros() as u64, Relaxed);
    }

    fn render(&self, out: &mut String, name: &str, labels: &str) {
        let mut cumulative = 0;
        for (bound, bucket) in LATENCY_BUCKETS.iter().zip(&self.buckets) {
            cumulative += bucket.load(Relaxed);
            let _ = writeln!(out, "{name}_bucket{{{labels}le=\"{bound}\"}} {cumulative}");
        }
        let count = self.count.load(Relaxed);
        let _ = writeln!(out, "{name}_bucket{{{labels}le=\"+Inf\"}} {count}");
        let _ = writeln!(
            out,
            "{name}_sum{{{}}} {}",
            labels.trim_end_matches(','),
            self.sum_micros.load(Relaxed) as f64 / 1e6
        );
        let _ = writeln!(out, "{name}_count{{{}}} {count}", labels.trim_end_matches(','));
    }
}

/// All of the origin's metrics.
#[derive(Default)]
pub struct Metrics {
    /// Lookups answered "not seen" by the filter alone.
    pub answered_by_filter: AtomicU64,
    /// Lookups answered by the key store.
    pub answered_by_database: AtomicU64,
    /// Key-store reads made for lookups.
    pub database_reads: AtomicU64,
    /// Lookups that failed because the key store failed.
    pub database_errors: AtomicU64,
    /// Filter fall-throughs by reason (index into [`FALLTHROUGH_REASONS`]).
    pub fallthroughs: [AtomicU64; FALLTHROUGH_REASONS.len()],
    /// Requests refused with 429.
    pub overloaded: AtomicU64,
    /// Manifests served to edges: one per isolate per refresh, the traffic that grows with the
    /// edge's footprint.
    pub edge_manifests: AtomicU64,
    /// Segments served to edges (cold isolates, new versions).
    pub edge_segments: AtomicU64,
    /// Journal chunks served to edges.
    pub edge_journals: AtomicU64,
    /// Keys written (acknowledged).
    pub writes: AtomicU64,
    /// Writes refused because the filter could not record the key.
    pub write_filter_failures: AtomicU64,
    /// Writes failed at the key store after the filter add.
    pub write_database_failures: AtomicU64,
    /// Single-key lookup latency.
    pub lookup_latency: Histogram,
    filters: RwLock<HashMap<String, Arc<FilterCounters>>>,
}

impl Metrics {
    /// Counters of one filter, created on first use.
    pub fn filter(&self, name: &str) -> Arc<FilterCounters> {
        if let Some(c) = self.filters.read().unwrap_or_else(|e| e.into_inner()).get(name) {
            return c.clone();
        }
        let mut filters = self.filters.write().unwrap_or_else(|e| e.into_inner());
        filters.entry(name.to_owned()).or_default().clone()
    }

    /// Counts a fall-through by its reason label.
    pub fn fallthrough(&self, reason: &str) {
        if let Some(i) = FALLTHROUGH_REASONS.iter().position(|r| *r == reason) {
            self.fallthroughs[i].fetch_add(1, Relaxed);
        }
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let mut out = String::with_capacity(4096);
        let counter = |out: &mut String, name: &str, help: &str, value: u64| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter\n{name} {value}");
        };
        let _ = writeln!(
            out,
            "# HELP bloomgate_lookups_total Lookups by who answered.\n# TYPE bloomgate_lookups_total counter"
        );
        let _ = writeln!(
            out,
            "bloomgate_lookups_total{{answered_by=\"filter\"}} {}",
            self.answered_by_filter.load(Relaxed)
        );
        let _ = writeln!(
            out,
            "bloomgate_lookups_total{{answered_by=\"database\"}} {}",
            self.answered_by_database.load(Relaxed)
        );
        counter(
            &mut out,
            "bloomgate_database_reads_total",
            "Key-store reads made for lookups.",
            self.database_reads.load(Relaxed),
        );
        counter(
            &mut out,
            "bloomgate_database_errors_total",
            "Lookups failed (503) because the key store failed.",
            self.database_errors.load(Relaxed),
        );
        let _ = writeln!(out, "# HELP bloomgate_filter_fallthroughs_total Lookups the filter could not answer, by reason.\n# TYPE bloomgate_filter_fallthroughs_total counter");
        for (reason, n) in FALLTHROUGH_REASONS.iter().zip(&self.fallthroughs) {
            let _ = writeln!(out, "bloomgate_filter_fallthroughs_total{{reason=\"{reason}\"}} {}", n.load(Relaxed));
        }
        counter(&mut out, "bloomgate_overloaded_total", "Requests refused with 429.", self.overloaded.load(Relaxed));
        let _ = writeln!(
            out,
            "# HELP bloomgate_edge_requests_total Manifests and segments served to edges.\n# TYPE bloomgate_edge_requests_total counter"
        );
        for (kind, n) in
            [("manifest", &self.edge_manifests), ("segment", &self.edge_segments), ("journal", &self.edge_journals)]
        {
            let _ = writeln!(out, "bloomgate_edge_requests_total{{kind=\"{kind}\"}} {}", n.load(Relaxed));
        }
        counter(&mut out, "bloomgate_writes_total", "Keys written and acknowledged.", self.writes.load(Relaxed));
        counter(
            &mut out,
            "bloomgate_write_filter_failures_total",
            "Writes refused because the filter add failed.",
            self.write_filter_failures.load(Relaxed),
        );
        counter(
            &mut out,
            "bloomgate_write_database_failures_total",
            "Writes failed at the key store after the filter add.",
            self.write_database_failures.load(Relaxed),
        );
        let filters = self.filters.read().unwrap_or_else(|e| e.into_inner());
        let mut names: Vec<&String> = filters.keys().collect();
        names.sort();
        for (metric, help) in [
            ("bloomgate_filter_negatives_total", "Lookups the filter answered 'no'."),
            ("bloomgate_filter_maybes_total", "Lookups the filter answered 'maybe'."),
            ("bloomgate_false_positives_total", "'Maybe' answers the key store answered 'absent'."),
            ("bloomgate_deletes_total", "Keys deleted through this origin (their bits stay set until a rebuild)."),
        ] {
            let _ = writeln!(out, "# HELP {metric} {help}\n# TYPE {metric} counter");
            for name in &names {
                let c = &filters[*name];
                let value = match metric {
                    "bloomgate_filter_negatives_total" => &c.filter_negatives,
                    "bloomgate_filter_maybes_total" => &c.filter_maybes,
                    "bloomgate_false_positives_total" => &c.false_positives,
                    _ => &c.deletes,
                };
                let _ = writeln!(out, "{metric}{{filter=\"{name}\"}} {}", value.load(Relaxed));
            }
        }
        let _ = writeln!(
            out,
            "# HELP bloomgate_lookup_seconds Single-key lookup latency.\n# TYPE bloomgate_lookup_seconds histogram"
        );
        self.lookup_latency.render(&mut out, "bloomgate_lookup_seconds", "");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters_labels_and_cumulative_buckets() {
        let m = Metrics::default();
        m.answered_by_filter.fetch_add(3, Relaxed);
        m.fallthrough("segment_missing");
        m.filter("hashes").false_positives.fetch_add(2, Relaxed);
        m.lookup_latency.observe(Duration::from_micros(50));
        m.lookup_latency.observe(Duration::from_millis(3));
        m.edge_segments.fetch_add(4, Relaxed);
        let text = m.render();
        assert!(text.contains("bloomgate_edge_requests_total{kind=\"segment\"} 4"));
        assert!(text.contains("bloomgate_edge_requests_total{kind=\"manifest\"} 0"));
        assert!(text.contains("bloomgate_lookups_total{answered_by=\"filter\"} 3"));
        assert!(text.contains("bloomgate_filter_fallthroughs_total{reason=\"segment_missing\"} 1"));
        assert!(text.contains("bloomgate_false_positives_total{filter=\"hashes\"} 2"));
        assert!(text.contains("bloomgate_lookup_seconds_bucket{le=\"0.0001\"} 1"));
        assert!(text.contains("bloomgate_lookup_seconds_bucket{le=\"0.005\"} 2"));
        assert!(text.contains("bloomgate_lookup_seconds_count{} 2"));
    }
}
