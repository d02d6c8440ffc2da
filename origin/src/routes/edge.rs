//! Endpoints for the edge: the manifest and immutable, versioned segments. Behind the edge
//! secret: segments reveal which keys are stored, so they are not public.

use super::{ApiPath, AppState};
use crate::auth::Edge;
use crate::error::AppError;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use std::sync::atomic::Ordering::Relaxed;

/// Routes of this resource.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/v1/filters/{filter}/manifest", get(manifest))
        .route("/v1/filters/{filter}/segments/{generation}/{index}", get(segment))
}

async fn manifest(_: Edge, State(s): State<AppState>, ApiPath(filter): ApiPath<String>) -> Result<Response, AppError> {
    s.gate.metrics.edge_manifests.fetch_add(1, Relaxed);
    let manifest = s.gate.manifest(&filter).await?;
    let mut response = Json(manifest).into_response();
    // The manifest is what makes edges fresh: never cached on the way.
    response.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    Ok(response)
}

async fn segment(
    _: Edge,
    State(s): State<AppState>,
    headers: HeaderMap,
    ApiPath((filter, generation, index)): ApiPath<(String, u64, u32)>,
) -> Result<Response, AppError> {
    s.gate.metrics.edge_segments.fetch_add(1, Relaxed);
    let (version, wire) = s.gate.segment(&filter, generation, index).await?;
    let etag = format!("\"{generation}-{index}-{version}\"");
    if headers.get(header::IF_NONE_MATCH).is_some_and(|v| v.as_bytes() == etag.as_bytes()) {
        return Ok((axum::http::StatusCode::NOT_MODIFIED, [(header::ETAG, etag)]).into_response());
    }
    // Within a generation bits are only ever set, so a copy labelled version v answers
    // correctly for every key acknowledged before v: caches may keep it as long as they like;
    // the manifest decides when a newer version is needed.
    let mut response = wire.into_response();
    let h = response.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/vnd.bloomgate.segment"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("private, max-age=31536000, immutable"));
    h.insert(header::ETAG, HeaderValue::from_str(&etag).map_err(|e| AppError::BadRequest(e.to_string()))?);
    h.insert("x-bloomgate-segment-version", HeaderValue::from(version));
    Ok(response)
}
