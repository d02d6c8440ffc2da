//! Every HTTP request counted by method, route and status, timed, and held in the in-flight
//! gauge while it runs. The route is the router's pattern (`/v1/filters/{filter}/keys/{key}`),
//! never the raw path, so the label's values are bounded by the API, not by the keys asked for.
//!
//! This wraps every request, the cheapest lookups included, so it is a plain tower layer (no
//! boxed future, no clone of the router's service per request: `middleware::from_fn` cost
//! 1.2 µs more per "no", of 18, in BENCHMARKS.md), and its labels allocate nothing: methods are
//! matched to static names and route patterns are interned once each.

use crate::metrics::{Metrics, RequestLabels, RequestSeries, Stripe};
use axum::extract::{MatchedPath, Request};
use axum::http::Method;
use axum::response::Response;
use pin_project_lite::pin_project;
use std::collections::HashSet;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock, RwLock};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// The layer: `Router::layer(TrackRequests::layer(metrics))`.
#[derive(Clone)]
pub struct TrackRequestsLayer {
    metrics: Arc<Metrics>,
}

impl TrackRequestsLayer {
    /// Counting into `metrics`.
    pub fn new(metrics: Arc<Metrics>) -> TrackRequestsLayer {
        TrackRequestsLayer { metrics }
    }
}

impl<S> tower::Layer<S> for TrackRequestsLayer {
    type Service = TrackRequests<S>;

    fn layer(&self, inner: S) -> TrackRequests<S> {
        TrackRequests { inner, metrics: self.metrics.clone() }
    }
}

/// The service the layer wraps each route in.
#[derive(Clone)]
pub struct TrackRequests<S> {
    inner: S,
    metrics: Arc<Metrics>,
}

impl<S> tower::Service<Request> for TrackRequests<S>
where
    S: tower::Service<Request, Response = Response>,
{
    type Response = Response;
    type Error = S::Error;
    type Future = Tracked<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request) -> Self::Future {
        let route = request.extensions().get::<MatchedPath>().map_or("unmatched", |m| route_label(m.as_str()));
        let timer = RequestTimer::start(&self.metrics, request.method(), route);
        Tracked { inner: self.inner.call(request), timer }
    }
}

pin_project! {
    /// A request being handled: observed when its response is ready.
    pub struct Tracked<F> {
        #[pin]
        inner: F,
        timer: RequestTimer,
    }
}

impl<F, E> Future for Tracked<F>
where
    F: Future<Output = Result<Response, E>>,
{
    type Output = Result<Response, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let result = std::task::ready!(this.inner.poll(cx));
        if let Ok(response) = &result {
            this.timer.answered(response.status().as_u16());
        }
        Poll::Ready(result)
    }
}

/// One request's part in the request metrics: in the in-flight gauge from `start` until dropped
/// (however the request ends: a client that hangs up drops it), counted and timed by its
/// status once answered. The layer uses it for every route but the lookup lane's
/// ([`RouteTimer`]).
pub struct RequestTimer {
    metrics: Arc<Metrics>,
    in_flight: Option<Stripe>,
    started: Instant,
    method: &'static str,
    route: &'static str,
}

impl RequestTimer {
    /// A request of `method` to the route pattern `route` (a static label value) starts now.
    pub fn start(metrics: &Arc<Metrics>, method: &Method, route: &'static str) -> RequestTimer {
        let in_flight = Some(metrics.requests.in_flight.raise());
        RequestTimer {
            metrics: metrics.clone(),
            in_flight,
            started: Instant::now(),
            method: method_label(method),
            route,
        }
    }

    /// It was answered with `status`.
    pub fn answered(&self, status: u16) {
        let labels = RequestLabels { method: self.method, route: self.route, status };
        self.metrics.requests.observe(&labels, self.started.elapsed());
    }
}

impl Drop for RequestTimer {
    fn drop(&mut self) {
        if let Some(stripe) = self.in_flight.take() {
            self.metrics.requests.in_flight.lower(stripe);
        }
    }
}

/// The methods a [`RouteSeries`] holds resolved series for.
const SERIES_METHODS: [&str; 2] = ["GET", "HEAD"];
/// The statuses a [`RouteSeries`] holds resolved series for: what a lookup answers.
const SERIES_STATUSES: [u16; 6] = [200, 400, 404, 429, 500, 503];

/// One route's request series by method and status, each resolved from its family on first use
/// and read without a lock after: a request on a hot route touches no family map and clones
/// nothing. Series outside the table go through the families, as the layer's do.
pub struct RouteSeries {
    metrics: Arc<Metrics>,
    route: &'static str,
    table: [[OnceLock<RequestSeries>; SERIES_STATUSES.len()]; SERIES_METHODS.len()],
}

impl RouteSeries {
    /// The series of requests to the route pattern `route` (a static label value).
    pub fn new(metrics: Arc<Metrics>, route: &'static str) -> RouteSeries {
        RouteSeries { metrics, route, table: Default::default() }
    }

    /// A request of `method` starts now.
    pub fn start(&self, method: &Method) -> RouteTimer<'_> {
        let in_flight = Some(self.metrics.requests.in_flight.raise());
        RouteTimer { series: self, in_flight, started: Instant::now(), method: method_label(method) }
    }

    fn observe(&self, method: &'static str, status: u16, elapsed: Duration) {
        let row = SERIES_METHODS.iter().position(|m| *m == method);
        let column = SERIES_STATUSES.iter().position(|s| *s == status);
        let labels = RequestLabels { method, route: self.route, status };
        match (row, column) {
            (Some(row), Some(column)) => {
                self.table[row][column].get_or_init(|| self.metrics.requests.series(&labels)).observe(elapsed)
            }
            _ => self.metrics.requests.observe(&labels, elapsed),
        }
    }
}

/// A [`RequestTimer`] on a [`RouteSeries`], borrowing it.
pub struct RouteTimer<'a> {
    series: &'a RouteSeries,
    in_flight: Option<Stripe>,
    started: Instant,
    method: &'static str,
}

impl RouteTimer<'_> {
    /// When the request started (the clock read the rest of its path can share).
    pub fn started(&self) -> Instant {
        self.started
    }

    /// It was answered with `status`.
    pub fn answered(&self, status: u16) {
        self.series.observe(self.method, status, self.started.elapsed());
    }
}

impl Drop for RouteTimer<'_> {
    fn drop(&mut self) {
        if let Some(stripe) = self.in_flight.take() {
            self.series.metrics.requests.in_flight.lower(stripe);
        }
    }
}

/// The method as a static label value.
fn method_label(method: &Method) -> &'static str {
    match *method {
        Method::GET => "GET",
        Method::PUT => "PUT",
        Method::POST => "POST",
        Method::DELETE => "DELETE",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        Method::PATCH => "PATCH",
        _ => "OTHER",
    }
}

/// The route pattern as a static label value. Patterns come from the router (a matched route's
/// pattern, never a request's path), so the set leaked here is as small as the API.
fn route_label(pattern: &str) -> &'static str {
    static ROUTES: RwLock<Option<HashSet<&'static str>>> = RwLock::new(None);
    if let Some(known) = ROUTES.read().unwrap_or_else(|e| e.into_inner()).as_ref().and_then(|s| s.get(pattern)) {
        return known;
    }
    let mut routes = ROUTES.write().unwrap_or_else(|e| e.into_inner());
    let routes = routes.get_or_insert_with(HashSet::new);
    match routes.get(pattern) {
        Some(known) => known,
        None => {
            let leaked: &'static str = Box::leak(pattern.to_owned().into_boxed_str());
            routes.insert(leaked);
            leaked
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_static_and_interned_once() {
        let a = route_label(&String::from("/v1/filters/{filter}/keys/{key}"));
        let b = route_label(&String::from("/v1/filters/{filter}/keys/{key}"));
        assert_eq!(a, "/v1/filters/{filter}/keys/{key}");
        assert!(std::ptr::eq(a, b), "the second request reuses the first one's pattern");
        assert_eq!(method_label(&Method::GET), "GET");
        assert_eq!(method_label(&Method::from_bytes(b"PURGE").unwrap()), "OTHER");
    }
}
