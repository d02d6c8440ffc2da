//! The single-key lookup's lane, the path every "no" takes: admission, the request metrics, the
//! path, the lookup and the answer in one handler future, with no layer of its own. The same
//! answers, headers and metric lines as the route behind the two layers the rest of the API
//! has (`tests/lookup_lane_golden.rs` compares them), without what each layer costs per
//! request: a clone of a boxed route and a boxed future (`tests/allocations_per_no.rs`).

use super::keys::answer_lookup;
use super::{AppState, KeyPathRef};
use crate::admission::Admission;
use crate::request_metrics::{RequestTimer, RouteSeries};
use axum::extract::{Request, State};
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use bloomgate_client::paths;
use std::sync::Arc;

/// What the lane holds: the API's state, the lookups' admission, and the route's request
/// series resolved once.
struct LaneState {
    app: AppState,
    admission: Arc<Admission>,
    series: RouteSeries,
}

/// The lane's state, borrowed for the process's life. A state the router clones per request
/// costs an atomic add and subtract per `Arc` in it, on cache lines every core writes; this
/// one is made once per router and never cloned. (A router is built once per origin; a test
/// that builds many keeps each one's few hundred bytes.)
#[derive(Clone, Copy)]
pub struct Lane(&'static LaneState);

/// `GET`/`HEAD /v1/filters/{filter}/keys/{key}`, admitted by `admission`, and the 405 for
/// methods the path serves nowhere. Merge the layered rest into it after the request-metrics
/// layer is applied to that rest: the lane counts its own requests and 405s. (Merged first, its
/// methods lead the `Allow` header, as before the lane; its fallback is the path's.)
pub fn router(app: AppState, admission: Arc<Admission>) -> Router {
    let series = RouteSeries::new(app.gate.metrics.clone(), paths::KEY);
    let lane = Lane(Box::leak(Box::new(LaneState { app, admission, series })));
    Router::new().route(paths::KEY, get(lane_handler).fallback(not_allowed)).with_state(lane)
}

/// 405, counted as the layer counted it (axum adds the `Allow` header).
async fn not_allowed(State(Lane(lane)): State<Lane>, method: Method) -> StatusCode {
    RequestTimer::start(&lane.app.gate.metrics, &method, paths::KEY).answered(StatusCode::METHOD_NOT_ALLOWED.as_u16());
    StatusCode::METHOD_NOT_ALLOWED
}

async fn lane_handler(State(Lane(lane)): State<Lane>, request: Request) -> Response {
    let timer = lane.series.start(request.method());
    let response = match lane.admission.admit_lookup() {
        None => lane.admission.refused(request.into_body()).await,
        Some(_permit) => {
            // The lane serves one route, so the path is read against its pattern, borrowed.
            match KeyPathRef::read(paths::KEY, request.uri().path()) {
                Ok(path) => answer_lookup(&lane.app, path.filter(), path.key(), timer.started()).await.into_response(),
                Err(refused) => refused.into_response(),
            }
        }
    };
    timer.answered(response.status().as_u16());
    response
}
