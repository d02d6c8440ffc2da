//! `/v1/filters/{filter}`: create a filter, read its stats (writers only).

use super::{ApiJson, ApiPath, AppState};
use crate::auth::require_writer;
use crate::error::AppError;
use crate::gate::{CreateFilter, Created};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, put};
use axum::{Json, Router};
use serde_json::{json, Value};

/// Routes of this resource.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/v1/filters/{filter}", put(create))
        .route("/v1/filters/{filter}/stats", get(stats))
        .route("/v1/filters/{filter}/rebuild", axum::routing::post(rebuild))
}

async fn create(
    State(s): State<AppState>,
    headers: HeaderMap,
    ApiPath(filter): ApiPath<String>,
    ApiJson(body): ApiJson<CreateFilter>,
) -> Result<Response, AppError> {
    require_writer(&headers, &s.config.writer_tokens)?;
    let created = s.gate.create_filter(&filter, body).await?;
    let status = if created == Created::New { StatusCode::CREATED } else { StatusCode::OK };
    let stats = s.gate.stats(&filter).await?;
    Ok((status, Json(stats)).into_response())
}

async fn stats(
    State(s): State<AppState>,
    headers: HeaderMap,
    ApiPath(filter): ApiPath<String>,
) -> Result<Json<Value>, AppError> {
    require_writer(&headers, &s.config.writer_tokens)?;
    Ok(Json(json!(s.gate.stats(&filter).await?)))
}

/// Optional resize with a rebuild.
#[derive(serde::Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RebuildBody {
    capacity: Option<u64>,
    fp_rate: Option<f64>,
}

/// Starts an online rebuild (202), or 409 if one is running.
async fn rebuild(
    State(s): State<AppState>,
    headers: HeaderMap,
    ApiPath(filter): ApiPath<String>,
    body: axum::body::Bytes,
) -> Result<Response, AppError> {
    require_writer(&headers, &s.config.writer_tokens)?;
    s.gate.def(&filter).await?;
    let body: RebuildBody = if body.is_empty() {
        RebuildBody::default()
    } else {
        serde_json::from_slice(&body).map_err(|e| AppError::BadRequest(format!("invalid JSON body: {e}")))?
    };
    if let (Some(capacity), fp) = (body.capacity, body.fp_rate) {
        bloomgate_filter::Params::for_capacity(capacity, fp.unwrap_or(0.01))?;
    }
    let options = crate::rebuild::RebuildOptions {
        capacity: body.capacity,
        fp_rate: body.fp_rate,
        ..s.config.rebuild_options(false)
    };
    s.gate.metrics.filter(&filter).mark_build();
    let filters = s.gate.filter_store().clone();
    let keys = s.gate.key_store().clone();
    match crate::rebuild::start(filters, keys, filter.clone(), options).await {
        Ok(_task) => Ok((StatusCode::ACCEPTED, Json(json!({ "filter": filter, "rebuilding": true }))).into_response()),
        Err(crate::rebuild::RebuildError::Busy) => {
            Err(AppError::Conflict(format!("a rebuild of {filter:?} is already running")))
        }
        Err(e) => Err(AppError::BadRequest(e.to_string())),
    }
}
