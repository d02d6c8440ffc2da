//! The single-key lookup's lane, the path every "no" takes: admission, the request metrics, the
//! path, the lookup and the answer in one handler future, with no layer of its own. The same
//! answers, headers and metric lines as the route behind the two layers the rest of the API
//! has (`tests/lookup_lane_golden.rs` compares them), without what each layer costs per
//! request: a clone of a boxed route and a boxed future (`tests/allocations_per_no.rs`).

use super::keys::lookup;
use super::{AppState, KeyPath};
use crate::admission::Admission;
use crate::request_metrics::RequestTimer;
use axum::extract::{FromRequestParts, Request, State};
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use bloomgate_client::paths;
use std::sync::Arc;

/// What the lane holds: the API's state and the lookups' admission.
#[derive(Clone)]
pub struct Lane {
    app: AppState,
    admission: Arc<Admission>,
}

/// `GET`/`HEAD /v1/filters/{filter}/keys/{key}`, admitted by `admission`, and the 405 for
/// methods the path serves nowhere. Merge the layered rest into it after the request-metrics
/// layer is applied to that rest: the lane counts its own requests and 405s. (Merged first, its
/// methods lead the `Allow` header, as before the lane; its fallback is the path's.)
pub fn router(app: AppState, admission: Arc<Admission>) -> Router {
    Router::new().route(paths::KEY, get(lane).fallback(not_allowed)).with_state(Lane { app, admission })
}

/// 405, counted as the layer counted it (axum adds the `Allow` header).
async fn not_allowed(State(lane): State<Lane>, method: Method) -> StatusCode {
    RequestTimer::start(&lane.app.gate.metrics, &method, paths::KEY).answered(StatusCode::METHOD_NOT_ALLOWED.as_u16());
    StatusCode::METHOD_NOT_ALLOWED
}

async fn lane(State(lane): State<Lane>, request: Request) -> Response {
    let timer = RequestTimer::start(&lane.app.gate.metrics, request.method(), paths::KEY);
    let response = match lane.admission.admit_lookup() {
        None => lane.admission.refused(request.into_body()).await,
        Some(_permit) => {
            let (mut parts, _) = request.into_parts();
            match KeyPath::from_request_parts(&mut parts, &()).await {
                Ok(path) => lookup(State(lane.app), path).await.into_response(),
                Err(refused) => refused.into_response(),
            }
        }
    };
    timer.answered(response.status().as_u16());
    response
}
