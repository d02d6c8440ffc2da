//! `/v1/filters` and `/v1/filters/{filter}`: create, rebuild and drop a filter (writer tokens),
//! list the filters and read a filter's stats (writer or ops tokens).

use super::{ApiJson, ApiPath, AppState};
use crate::auth::{Reader, Writer};
use crate::error::AppError;
use crate::gate::{CreateFilter, Created};
use crate::rebuild::RebuildError;
use crate::sizing::check_size;
use crate::store::FilterUnavailable;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, put};
use axum::{Json, Router};
use bloomgate_client::api::{DropQuery, FilterDropped, FilterList, FilterStats, Problem, Rebuild, RebuildStarted};
use bloomgate_client::{media, paths};
use bloomgate_filter::{Params, SizingOptions};

/// Routes of this resource.
pub fn router() -> Router<AppState> {
    Router::new()
        .route(paths::FILTERS, get(list))
        .route(paths::FILTER, put(create).delete(drop_filter))
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
    if created == Created::NewFromKeys {
        // Its first generation is built from the keys the database holds; the recovery check
        // would start it too, this starts it now. Busy: another origin's already runs.
        let (filters, keys) = (s.gate.filter_store().clone(), s.gate.database().clone());
        match crate::rebuild::start(filters, keys, filter.clone(), s.config.rebuild_options(false)).await {
            Ok(_) | Err(RebuildError::Busy) => {}
            Err(e) => {
                tracing::warn!(filter = %filter, cause = %e, "the first build of a filter created over kept keys did not start; the recovery check will")
            }
        }
    }
    let status = if created == Created::Existing { StatusCode::OK } else { StatusCode::CREATED };
    let stats = s.gate.stats(&filter).await?;
    Ok((status, Json(stats)).into_response())
}

/// Every filter, by name: definition and the generation answering its lookups.
pub(super) async fn list(_: Reader, State(s): State<AppState>) -> Result<Json<FilterList>, AppError> {
    Ok(Json(s.gate.list_filters().await?))
}

/// Drops a filter: its bits, journal, definition and bookkeeping; its keys in the database are
/// kept unless `?keys=delete` (see `DropKeys` for why keeping is the default). Lookups and
/// writes then answer 404 "no such filter". The drop runs to its end even if the request does
/// not wait for it (a client gone, the request timeout): asking again finishes or confirms it.
pub(super) async fn drop_filter(
    _: Writer,
    State(s): State<AppState>,
    ApiPath(filter): ApiPath<String>,
    query: Result<Query<DropQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<FilterDropped>, AppError> {
    let Query(query) = query.map_err(|e| {
        AppError::BadRequest(format!(
            "drop query: {}; expected ?keys=keep (the default) or ?keys=delete",
            e.body_text()
        ))
    })?;
    let concurrency = s.config.rebuild_concurrency.max(1);
    let gate = s.gate.clone();
    let dropping = tokio::spawn(async move { gate.drop_filter(&filter, query.keys, concurrency).await });
    let stopped =
        |e: tokio::task::JoinError| AppError::FilterWrite(FilterUnavailable::Error(format!("the drop stopped: {e}")));
    let dropped = dropping.await.map_err(stopped)??;
    Ok(Json(dropped))
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
            AppError::FilterWrite(FilterUnavailable::Error(e.to_string()))
        }
    }
}
