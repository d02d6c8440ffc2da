//! The status page: `/status` (one HTML page, no build chain: the plots are drawn in the
//! browser as SVG from `/status/data`) and `/status/data` (every filter's recent samples, see
//! `status_history`). Served only with `status_page = true`, and then without a token: turn it
//! on where the origin's port is internal.

use super::AppState;
use crate::error::AppError;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::{Json, Router};
use serde_json::json;

/// The page itself.
const PAGE: &str = include_str!("status.html");

/// Routes of this resource.
pub fn router() -> Router<AppState> {
    Router::new().route("/status", get(page)).route("/status/data", get(data))
}

fn enabled(s: &AppState) -> Result<(), AppError> {
    match s.config.status_page {
        true => Ok(()),
        false => Err(AppError::NotFound("the status page is off (status_page = true turns it on)".into())),
    }
}

async fn page(State(s): State<AppState>) -> Result<impl IntoResponse, AppError> {
    enabled(&s)?;
    Ok(([(header::CONTENT_TYPE, "text/html; charset=utf-8"), (header::CACHE_CONTROL, "no-store")], PAGE))
}

async fn data(State(s): State<AppState>) -> Result<impl IntoResponse, AppError> {
    enabled(&s)?;
    Ok(Json(json!({
        "version": env!("CARGO_PKG_VERSION"),
        "recovery_interval_ms": s.config.recovery_interval_ms,
        "filters": s.gate.status.snapshot(),
    })))
}
