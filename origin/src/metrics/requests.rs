//! HTTP requests: counted and timed by method, route and status; those in flight. (Those
//! refused for overload: `admission`.)

use super::striped::{StripedCounter, StripedGauge, StripedLatency};
use super::{row, Row};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
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
    counted: Family<RequestLabels, StripedCounter>,
    latency: Family<RequestLabels, StripedLatency>,
    /// HTTP requests being handled.
    pub in_flight: StripedGauge,
}

/// One series of requests (a method, route and status): its count and latency, resolved from
/// their families once, so a request that reuses them takes no family lock.
#[derive(Clone)]
pub struct RequestSeries {
    counted: StripedCounter,
    latency: StripedLatency,
}

impl RequestSeries {
    /// Records a finished HTTP request of this series.
    pub fn observe(&self, elapsed: Duration) {
        self.counted.inc();
        self.latency.observe(elapsed);
    }
}

impl RequestMetrics {
    pub(super) fn new() -> RequestMetrics {
        RequestMetrics { counted: Family::default(), latency: Family::default(), in_flight: StripedGauge::default() }
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
        self.latency.get_or_create(labels).observe(elapsed);
    }

    /// The series of `labels`, created (at zero) if it was not yet.
    pub fn series(&self, labels: &RequestLabels) -> RequestSeries {
        RequestSeries {
            counted: self.counted.get_or_create_owned(labels),
            latency: self.latency.get_or_create_owned(labels),
        }
    }
}
