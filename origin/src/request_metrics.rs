//! Every HTTP request counted by method, route and status, timed, and held in the in-flight
//! gauge while it runs. The route is the router's pattern (`/v1/filters/{filter}/keys/{key}`),
//! never the raw path, so the label's values are bounded by the API, not by the keys asked for.

use crate::metrics::{Metrics, RequestLabels};
use axum::extract::{MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::Response;
use std::sync::Arc;
use std::time::Instant;

/// Leaves the in-flight gauge when the request ends, however it ends (a client that hangs up
/// drops the future).
struct InFlight(Arc<Metrics>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.dec();
    }
}

/// The middleware (`axum::middleware::from_fn_with_state`).
pub async fn track(State(metrics): State<Arc<Metrics>>, request: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = request.method().as_str().to_owned();
    let route = request.extensions().get::<MatchedPath>().map_or("unmatched", MatchedPath::as_str).to_owned();
    metrics.in_flight.inc();
    let _in_flight = InFlight(metrics.clone());
    let response = next.run(request).await;
    let labels = RequestLabels { method, route, status: response.status().as_u16() };
    metrics.observe_request(&labels, started.elapsed());
    response
}
