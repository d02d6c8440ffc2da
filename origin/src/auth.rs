//! Who may call what: writer tokens for the write API, the edge secret for segments.

use crate::error::AppError;
use crate::routes::AppState;
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::HeaderMap;
use bloomgate_client::headers::EDGE_SECRET as EDGE_SECRET_HEADER;
use subtle::ConstantTimeEq;

/// A request from a writer: extracting it checks the bearer token. As a handler's first
/// argument it runs before the body is read, so a caller without a token costs no body.
pub struct Writer;

impl FromRequestParts<AppState> for Writer {
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Self::Rejection> {
        require_writer(&parts.headers, &state.config.writer_tokens).map(|()| Writer)
    }
}

/// A request from the edge: extracting it checks the edge secret.
pub struct Edge;

impl FromRequestParts<AppState> for Edge {
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Self::Rejection> {
        require_edge(&parts.headers, state.config.edge_secret.as_deref()).map(|()| Edge)
    }
}

/// Compares in time independent of where the inputs differ (length is not secret). `subtle`
/// keeps the optimiser from turning the comparison back into one that stops at the first
/// difference, which a hand-written fold does not guarantee.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    bool::from(a.ct_eq(b))
}

/// Requires `Authorization: Bearer <token>` with one of `tokens`.
pub fn require_writer(headers: &HeaderMap, tokens: &[String]) -> Result<(), AppError> {
    let value = headers.get(axum::http::header::AUTHORIZATION).ok_or(AppError::Unauthorized)?;
    let token = value
        .to_str()
        .ok()
        .and_then(|v| v.strip_prefix("Bearer "))
        .ok_or_else(|| AppError::BadRequest("Authorization must be 'Bearer <token>'".into()))?;
    // Check every token so the time taken does not reveal which one matched.
    let matched = tokens.iter().fold(false, |hit, t| constant_time_eq(t.as_bytes(), token.as_bytes()) | hit);
    if matched {
        Ok(())
    } else {
        Err(AppError::Forbidden)
    }
}

/// Requires the edge secret; edge endpoints are off when none is configured.
pub fn require_edge(headers: &HeaderMap, secret: Option<&str>) -> Result<(), AppError> {
    let secret = secret.ok_or(AppError::Forbidden)?;
    let sent = headers.get(EDGE_SECRET_HEADER).ok_or(AppError::Unauthorized)?;
    if constant_time_eq(sent.as_bytes(), secret.as_bytes()) {
        Ok(())
    } else {
        Err(AppError::Forbidden)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn writer_tokens() {
        let tokens = vec!["0123456789abcdef".to_string()];
        let mut h = HeaderMap::new();
        assert!(matches!(require_writer(&h, &tokens), Err(AppError::Unauthorized)));
        h.insert("authorization", HeaderValue::from_static("Bearer nope"));
        assert!(matches!(require_writer(&h, &tokens), Err(AppError::Forbidden)));
        h.insert("authorization", HeaderValue::from_static("Basic 0123456789abcdef"));
        assert!(matches!(require_writer(&h, &tokens), Err(AppError::BadRequest(_))));
        h.insert("authorization", HeaderValue::from_static("Bearer 0123456789abcdef"));
        assert!(require_writer(&h, &tokens).is_ok());
        assert!(matches!(require_writer(&h, &[]), Err(AppError::Forbidden)));
    }

    #[test]
    fn edge_secret() {
        let mut h = HeaderMap::new();
        assert!(matches!(require_edge(&h, Some("s3cret")), Err(AppError::Unauthorized)));
        h.insert(EDGE_SECRET_HEADER, HeaderValue::from_static("s3cret"));
        assert!(require_edge(&h, Some("s3cret")).is_ok());
        assert!(matches!(require_edge(&h, Some("other")), Err(AppError::Forbidden)));
        assert!(matches!(require_edge(&h, None), Err(AppError::Forbidden)));
    }
}
