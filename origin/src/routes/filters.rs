//! `/v1/filters` and `/v1/filters/{filter}`: create, rebuild and drop a filter (writer tokens),
//! list the filters and read a filter's stats (writer or ops tokens).

use super::refusals::{Busy, NeitherToken, NoToken, NotAWriter};
use super::{ApiBytes, ApiJson, ApiPath, AppState};
use crate::auth::{Reader, Writer};
use crate::error::AppError;
use crate::gate::{CreateFilter, Created};
use crate::rebuild::{RebuildError, RebuildOptions};
use crate::store::FilterUnavailable;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, put};
use axum::{Json, Router};
use bloomgate_client::api::{DropQuery, FilterDropped, FilterList, FilterStats, Problem, Rebuild, RebuildStarted};
use bloomgate_client::{media, paths};

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
        (status = 201, description = "created; a name whose dropped filter kept its keys is built from them (generation null until then)", body = FilterStats),
        (status = 200, description = "already there, the same", body = FilterStats),
        (status = 400, description = "impossible sizing (or over max_filter_bytes), a malformed name, body or Authorization header", body = Problem, content_type = media::PROBLEM_JSON),
        (status = 409, description = "already there, defined otherwise; or the name's dropped filter had another key_format (a name keeps it); or a drop of it has not finished", body = Problem, content_type = media::PROBLEM_JSON),
        (status = 413, description = "a body over the limit", body = Problem, content_type = media::PROBLEM_JSON),
        (status = 503, description = "the filter store or the database is unavailable; retry after Retry-After", body = Problem, content_type = media::PROBLEM_JSON),
        NoToken, NotAWriter, Busy,
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
        match s.gate.start_rebuild(&filter, RebuildOptions::from_config(&s.config, false)).await {
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
#[utoipa::path(get, path = paths::FILTERS, tag = "filters",
    responses(
        (status = 200, body = FilterList),
        (status = 400, description = "a malformed Authorization header", body = Problem, content_type = media::PROBLEM_JSON),
        (status = 503, description = "the database did not answer; retry after Retry-After", body = Problem, content_type = media::PROBLEM_JSON),
        NoToken, NeitherToken, Busy,
    ),
    security(("writer_token" = []), ("ops_token" = [])))]
pub(super) async fn list(_: Reader, State(s): State<AppState>) -> Result<Json<FilterList>, AppError> {
    Ok(Json(s.gate.list_filters().await?))
}

/// Drops a filter: its bits, journal, definition and bookkeeping; its keys in the database are
/// kept unless `?keys=delete` (see `DropKeys` for why keeping is the default). Lookups and
/// writes then answer 404 "no such filter". The drop runs to its end even if the request does
/// not wait for it (a client gone, the request timeout): asking again finishes or confirms it.
#[utoipa::path(delete, path = paths::FILTER, tag = "filters",
    params(("filter" = String, Path), DropQuery),
    responses(
        (status = 200, description = "dropped: bits, journal, definition; keys kept in the database (keys=keep, the default: a filter created again under the name is built from them) or deleted (keys=delete). Lookups and writes now answer 404 no such filter", body = FilterDropped),
        (status = 400, description = "a malformed name, query or Authorization header", body = Problem, content_type = media::PROBLEM_JSON),
        (status = 404, description = "no such filter (or already dropped)", body = Problem, content_type = media::PROBLEM_JSON),
        (status = 503, description = "the drop did not finish (a store did not answer, or a rebuild kept switching generations): send it again to finish it", body = Problem, content_type = media::PROBLEM_JSON),
        NoToken, NotAWriter, Busy,
    ),
    security(("writer_token" = [])))]
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
    let stopped = |e: tokio::task::JoinError| AppError::DropStopped(FilterUnavailable::Error(e.to_string()));
    let dropped = dropping.await.map_err(stopped)??;
    Ok(Json(dropped))
}

/// A filter's state and health: generation, fill, expected and observed false-positive rates,
/// rebuild progress.
#[utoipa::path(get, path = paths::STATS, tag = "filters", params(("filter" = String, Path)),
    responses(
        (status = 200, body = FilterStats),
        (status = 400, description = "a malformed name or Authorization header", body = Problem, content_type = media::PROBLEM_JSON),
        (status = 404, description = "no such filter (or it was dropped)", body = Problem, content_type = media::PROBLEM_JSON),
        (status = 503, description = "the filter's bits are unavailable, or the stores did not answer; retry after Retry-After", body = Problem, content_type = media::PROBLEM_JSON),
        NoToken, NeitherToken, Busy,
    ),
    security(("writer_token" = []), ("ops_token" = [])))]
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
        (status = 202, description = "started; its progress is in the stats", body = RebuildStarted),
        (status = 400, description = "impossible sizing (or over max_filter_bytes), a malformed name, body or Authorization header", body = Problem, content_type = media::PROBLEM_JSON),
        (status = 404, description = "no such filter", body = Problem, content_type = media::PROBLEM_JSON),
        (status = 409, description = "a rebuild is running", body = Problem, content_type = media::PROBLEM_JSON),
        (status = 413, description = "a body over the limit", body = Problem, content_type = media::PROBLEM_JSON),
        (status = 503, description = "the filter store or the database is unavailable; retry after Retry-After", body = Problem, content_type = media::PROBLEM_JSON),
        NoToken, NotAWriter, Busy,
    ),
    security(("writer_token" = [])))]
pub(super) async fn rebuild(
    _: Writer,
    State(s): State<AppState>,
    ApiPath(filter): ApiPath<String>,
    ApiBytes(body): ApiBytes,
) -> Result<Response, AppError> {
    // The name checked and a 404 for an unknown filter, from the cache, before the body.
    s.gate.def(&filter).await?;
    let body: Rebuild = if body.is_empty() {
        Rebuild::default()
    } else {
        serde_json::from_slice(&body).map_err(|e| AppError::BadRequest(format!("invalid JSON body: {e}")))?
    };
    let options = RebuildOptions {
        capacity: body.capacity,
        fp_rate: body.fp_rate,
        ..RebuildOptions::from_config(&s.config, false)
    };
    // Its sizing is checked before anything is stored: refused now, not in the background.
    s.gate.start_rebuild(&filter, options).await?;
    Ok((StatusCode::ACCEPTED, Json(RebuildStarted { filter, rebuilding: true })).into_response())
}
