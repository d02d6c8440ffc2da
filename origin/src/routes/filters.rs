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
}

async fn create(
    State(s): State<AppState>,
    headers: HeaderMap,
    ApiPath(filter): ApiPath<String>,
    ApiJson(body): ApiJson<CreateFilter>,
) -> Result<Response, AppError> {
    require_writer(&headers, &s.config.writer_tokens)?;
    let created = s.gate.create_filter(&filter, body).await?;
    let status = if created == Created::New {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
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
