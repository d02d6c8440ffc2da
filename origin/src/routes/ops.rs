//! Operations: `/metrics` (Prometheus, OpenMetrics text), `/healthz` (the process is up), `/readyz` (both
//! stores answer; the filter being down is reported but does not make the origin unready,
//! since lookups still work without it).

use super::AppState;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::{Json, Router};
use bloomgate_client::paths;
use serde_json::json;

/// Routes of this resource.
pub fn router() -> Router<AppState> {
    Router::new()
        .route(paths::METRICS, get(metrics))
        .route(paths::HEALTHZ, get(healthz))
        .route(paths::READYZ, get(readyz))
}

async fn metrics(State(s): State<AppState>) -> impl IntoResponse {
    ([(header::CONTENT_TYPE, crate::metrics::CONTENT_TYPE)], s.gate.metrics.render())
}

async fn healthz() -> impl IntoResponse {
    Json(json!({ "ok": true }))
}

async fn readyz(State(s): State<AppState>) -> impl IntoResponse {
    let database = s.gate.database().ping().await;
    let filter = s.gate.filter_store().ping().await;
    let status = if database.is_ok() { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    let body = json!({
        "ready": database.is_ok(),
        "database": database.map(|_| "ok".to_string()).unwrap_or_else(|e| e.to_string()),
        "filter": filter.map(|_| "ok".to_string()).unwrap_or_else(|e| e.to_string()),
    });
    (status, Json(body))
}
