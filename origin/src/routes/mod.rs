//! HTTP routes, one file per resource, and the layers around them.

pub mod batch;
pub mod edge;
pub mod filters;
pub mod keys;
pub mod ops;

use crate::config::Config;
use crate::error::AppError;
use crate::gate::Gate;
use axum::extract::rejection::{JsonRejection, PathRejection};
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use std::sync::Arc;

/// What every handler gets.
#[derive(Clone)]
pub struct AppState {
    /// The gate.
    pub gate: Arc<Gate>,
    /// The configuration.
    pub config: Arc<Config>,
}

/// `Path` whose rejections are problem+json 400s.
pub struct ApiPath<T>(pub T);

impl<T, S> FromRequestParts<S> for ApiPath<T>
where
    axum::extract::Path<T>: FromRequestParts<S, Rejection = PathRejection>,
    S: Send + Sync,
{
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match axum::extract::Path::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Path(v)) => Ok(ApiPath(v)),
            Err(e) => Err(AppError::BadRequest(format!("bad path: {}", e.body_text()))),
        }
    }
}

/// `Json` whose rejections are problem+json 4xx with the parser's reason.
pub struct ApiJson<T>(pub T);

impl<T, S> FromRequest<S> for ApiJson<T>
where
    axum::Json<T>: FromRequest<S, Rejection = JsonRejection>,
    S: Send + Sync,
{
    type Rejection = AppError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        match axum::Json::<T>::from_request(req, state).await {
            Ok(axum::Json(v)) => Ok(ApiJson(v)),
            Err(e) if e.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE => Err(AppError::BodyTooLarge),
            Err(e) if e.status() == axum::http::StatusCode::UNSUPPORTED_MEDIA_TYPE => {
                Err(AppError::BadRequest("send the body as JSON with 'Content-Type: application/json'".into()))
            }
            Err(e) => Err(AppError::BadRequest(format!("invalid JSON body: {}", e.body_text()))),
        }
    }
}

/// Path keys arrive percent-decoded: refuse NUL, which no key format means to carry in a URL.
pub fn path_key(key: &str) -> Result<&[u8], AppError> {
    if key.contains('\0') {
        return Err(AppError::BadRequest("key must not contain NUL (%00)".into()));
    }
    Ok(key.as_bytes())
}
