//! `/v1/filters/{filter}`: create a filter, rebuild it (writer tokens), read its stats (writer
//! or ops tokens).

use super::{ApiJson, ApiPath, AppState};
use crate::auth::{Reader, Writer};
use crate::error::AppError;
use crate::gate::{CreateFilter, Created};
use crate::rebuild::RebuildError;
use crate::sizing::check_size;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, put};
use axum::{Json, Router};
use bloomgate_client::api::{FilterStats, Problem, Rebuild, RebuildStarted};
use bloomgate_client::{media, paths};
use bloomgate_filter::{Params, SizingOptions};

/// Routes of this resource.
pub fn router() -> Router<AppState> {
    Router::new()
        .route(paths::FILTER, put(create))
        .route(paths::STATS, get(stats))
        .route(paths::REBUILD, axum::routing::post(rebuild))
}

/// Creates a filter (201), or confirms an identical one exists (200); a different one is 409.
#[utoipa::path(put, path = paths::FILTER, tag = "filters", params(("filter" = String, Path, description = "[a-z0-9_-]{1,64}")),
    request_body = CreateFilter,
    responses(
        (status = 201, description = "created", body = FilterStats),
        (status = 200, description = "already there, the same", body = FilterStats),
        (status = 409, description = "already there, defined otherwise", body = Problem, content_type = media::PROBLEM_JSON),
        (status = 422, description = "impossible sizing (or above max_filter_bytes)", body = Problem, content_type = media::PROBLEM_JSON),
    ),
    security(("writer_token" = [])))]
pub(super) async fn create(
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

/// A filter's state and health: generation, fill, expected and observed false-positive rates,
/// rebuild progress.
#[utoipa::path(get, path = paths::STATS, tag = "filters", params(("filter" = String, Path)),
    responses(
        (status = 200, body = FilterStats),
        (status = 404, description = "no such filter", body = Problem, content_type = media::PROBLEM_JSON),
        (status = 503, description = "the filter's bits are unavailable", body = Problem, content_type = media::PROBLEM_JSON),
    ),
    security(("writer_token" = [])))]
pub(super) async fn stats(
    _: Reader,
    State(s): State<AppState>,
    ApiPath(filter): ApiPath<String>,
) -> Result<Json<FilterStats>, AppError> {
    Ok(Json(s.gate.stats(&filter).await?))
}

/// Starts an online rebuild (202), optionally resizing; 409 if one is running. The body may
/// be empty.
#[utoipa::path(post, path = paths::REBUILD, tag = "filters", params(("filter" = String, Path)),
    request_body(content = Rebuild, description = "optional"),
    responses(
        (status = 202, body = RebuildStarted),
        (status = 409, description = "a rebuild is running", body = Problem, content_type = media::PROBLEM_JSON),
    ),
    security(("writer_token" = [])))]
pub(super) async fn rebuild(
    _: Writer,
    State(s): State<AppState>,
    ApiPath(filter): ApiPath<String>,
    body: axum::body::Bytes,
) -> Result<Response, AppError> {
    let def = s.gate.def(&filter).await?;
    let body: Rebuild = if body.is_empty() {
        Rebuild::default()
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
    let keys = s.gate.database().clone();
    match crate::rebuild::start(filters, keys, filter.clone(), options).await {
        Ok(_task) => Ok((StatusCode::ACCEPTED, Json(RebuildStarted { filter, rebuilding: true })).into_response()),
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
        RebuildError::Keys(e) => AppError::Database(e),
        e @ (RebuildError::Alloc(_) | RebuildError::LeaseLost) => {
            AppError::FilterWrite(crate::store::FilterUnavailable::Error(e.to_string()))
        }
    }
}
