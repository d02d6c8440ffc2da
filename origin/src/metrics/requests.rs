//! HTTP requests: counted and timed by method, route and status; those in flight. (Those
//! refused for overload: `admission`.)

use super::{latency_histogram, row, Row};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use std::time::Duration;

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

/// The requests' metrics.
pub struct RequestMetrics {
    counted: Family<RequestLabels, Counter>,
    latency: Family<RequestLabels, Histogram, fn() -> Histogram>,
    /// HTTP requests being handled.
    pub in_flight: Gauge,
}

impl RequestMetrics {
    pub(super) fn new() -> RequestMetrics {
        RequestMetrics {
            counted: Family::default(),
            latency: Family::new_with_constructor(latency_histogram),
            in_flight: Gauge::default(),
        }
    }

    pub(super) fn rows(&self) -> Vec<Row> {
        vec![
            row("http_requests", "HTTP requests by method, route and status.", &self.counted),
            row("http_request_seconds", "HTTP request latency by method, route and status, seconds.", &self.latency),
            row("http_in_flight", "HTTP requests being handled.", &self.in_flight),
        ]
    }

    /// Records a finished HTTP request.
    pub fn observe(&self, labels: &RequestLabels, elapsed: Duration) {
        self.counted.get_or_create(labels).inc();
        self.latency.get_or_create(labels).observe(elapsed.as_secs_f64());
    }
}
