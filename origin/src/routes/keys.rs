//! `/v1/filters/{filter}/keys/...` and `/lookups`: the public lookup API and the writers' API.

use super::batch::KeysBatch;
use super::{ApiPath, AppState, KeyPath};
use crate::auth::Writer;
use crate::error::AppError;
use crate::gate::Answer;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use base64::Engine;
use serde_json::{json, Value};

/// Header naming who answered a lookup: `filter`, `database` (origin) or `edge`.
pub const ANSWERED_BY_HEADER: &str = "x-bloomgate-answered-by";

/// Routes of this resource.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/v1/filters/{filter}/keys/{key}", get(lookup).put(insert).delete(delete))
        .route("/v1/filters/{filter}/lookups", post(lookup_batch))
        .route("/v1/filters/{filter}/keys", post(insert_batch))
}

fn answer_json(filter: &str, key: &str, answer: &Answer) -> Value {
    let mut body = json!({
        "filter": filter,
        "key": key,
        "seen": answer.seen,
        "answered_by": answer.answered_by.as_str(),
    });
    if let Some(value) = answer.value.as_deref().filter(|v| !v.is_empty()) {
        body["value"] = match std::str::from_utf8(value) {
            Ok(text) => json!(text),
            Err(_) => json!({ "base64": base64::engine::general_purpose::STANDARD.encode(value) }),
        };
    }
    body
}

async fn lookup(State(s): State<AppState>, KeyPath { filter, key }: KeyPath) -> Result<Response, AppError> {
    let answer = s.gate.lookup(&filter, key.as_bytes()).await?;
    let status = if answer.seen { StatusCode::OK } else { StatusCode::NOT_FOUND };
    let mut response = (status, Json(answer_json(&filter, &key, &answer))).into_response();
    response.headers_mut().insert(ANSWERED_BY_HEADER, HeaderValue::from_static(answer.answered_by.as_str()));
    Ok(response)
}

async fn lookup_batch(
    State(s): State<AppState>,
    ApiPath(filter): ApiPath<String>,
    KeysBatch(keys): KeysBatch,
) -> Result<Json<Value>, AppError> {
    let answers = s.gate.lookup_many(&filter, &keys).await?;
    let results: Vec<Value> = keys.iter().zip(&answers).map(|(k, a)| answer_json(&filter, k, a)).collect();
    Ok(Json(json!({ "filter": filter, "results": results })))
}

async fn insert(
    _: Writer,
    State(s): State<AppState>,
    KeyPath { filter, key }: KeyPath,
    value: Bytes,
) -> Result<Response, AppError> {
    if value.len() > s.config.max_value_bytes {
        return Err(AppError::ValueTooLarge { max: s.config.max_value_bytes, got: value.len() });
    }
    s.gate.insert(&filter, key.as_bytes(), &value).await?;
    Ok((StatusCode::CREATED, Json(json!({ "filter": filter, "key": key, "stored": true }))).into_response())
}

async fn insert_batch(
    _: Writer,
    State(s): State<AppState>,
    ApiPath(filter): ApiPath<String>,
    KeysBatch(keys): KeysBatch,
) -> Result<Json<Value>, AppError> {
    let stored = s.gate.insert_batch(&filter, &keys).await?;
    Ok(Json(json!({ "filter": filter, "stored": stored })))
}

async fn delete(
    _: Writer,
    State(s): State<AppState>,
    KeyPath { filter, key }: KeyPath,
) -> Result<Json<Value>, AppError> {
    let existed = s.gate.delete(&filter, key.as_bytes()).await?;
    Ok(Json(json!({ "filter": filter, "key": key, "deleted": existed })))
}
