//! `/v1/filters/{filter}`: create a filter, read its stats (writers only).

use super::{ApiJson, ApiPath, AppState};
use crate::auth::Writer;
use crate::error::AppError;
use crate::gate::{CreateFilter, Created};
use crate::rebuild::RebuildError;
use crate::sizing::check_size;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, put};
use axum::{Json, Router};
use bloomgate_filter::{Params, SizingOptions};
use serde_json::{json, Value};

/// Routes of this resource.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/v1/filters/{filter}", put(create))
        .route("/v1/filters/{filter}/stats", get(stats))
        .route("/v1/filters/{filter}/rebuild", axum::routing::post(rebuild))
}

async fn create(
    _: Writer,
    State(s): State<AppState>,
    ApiPath(filter): ApiPath<String>,
    ApiJson(body): ApiJson<CreateFilter>,
) -> Result<Response, AppError> {
    let created = s.gate.create_filter(&filter, body).await?;
    let status = if created == Created::New { StatusCode::CREATED } else { StatusCode::OK };
    let stats = s.gate.stats(&filter).await?;
    Ok((status, Json(stats)).into_response())
}

async fn stats(
    _: Writer,
    State(s): State<AppState>,
    ApiPath(filter): ApiPath<String>,
) -> Result<Json<Value>, AppError> {
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
    _: Writer,
    State(s): State<AppState>,
    ApiPath(filter): ApiPath<String>,
    body: axum::body::Bytes,
) -> Result<Response, AppError> {
    let def = s.gate.def(&filter).await?;
    let body: RebuildBody = if body.is_empty() {
        RebuildBody::default()
    } else {
        serde_json::from_slice(&body).map_err(|e| AppError::BadRequest(format!("invalid JSON body: {e}")))?
    };
    // The sizing the rebuild will build, checked as it will be: with the filter's own segment
    // size, before anything is stored.
    let sizing = SizingOptions { seed: 0, segment_bytes: def.segment_bytes };
    let params =
        Params::for_capacity_with(body.capacity.unwrap_or(def.capacity), body.fp_rate.unwrap_or(def.fp_rate), sizing)?;
    check_size(&params, s.gate.max_filter_bytes())?;
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
        Err(e) => Err(rebuild_error(&filter, e)),
    }
}

/// A rebuild that could not start, as the caller should see it: their mistakes are 4xx, the
/// stores' failures 503 (with the cause logged, not sent).
fn rebuild_error(filter: &str, e: RebuildError) -> AppError {
    match e {
        RebuildError::Busy => AppError::Conflict(format!("a rebuild of {filter:?} is already running")),
        RebuildError::UnknownFilter(name) => AppError::UnknownFilter(name),
        RebuildError::Params(e) => AppError::BadParams(e),
        RebuildError::TooLarge(e) => AppError::FilterTooLarge(e),
        RebuildError::Filter(e) => AppError::FilterWrite(e),
        RebuildError::Keys(e) => AppError::KeyStore(e),
        e @ (RebuildError::Alloc(_) | RebuildError::LeaseLost) => {
            AppError::FilterWrite(crate::store::FilterUnavailable::Error(e.to_string()))
        }
    }
}
