//! HTTP routes, one file per resource, and the layers around them.

pub mod batch;
pub mod edge;
pub mod filters;
pub mod keys;
pub mod lookup_lane;
pub mod openapi;
pub mod ops;
mod refusals;
pub mod status;

use crate::config::Config;
use crate::error::AppError;
use crate::gate::Gate;
use axum::extract::rejection::{JsonRejection, PathRejection};
use axum::extract::{FromRequest, FromRequestParts, MatchedPath, Request};
use axum::http::request::Parts;
use bloomgate_filter::{decode_path_key_borrowed, validate_filter_name};
use std::borrow::Cow;
use std::sync::Arc;

/// What every handler gets.
#[derive(Clone)]
pub struct AppState {
    /// The gate.
    pub gate: Arc<Gate>,
    /// The configuration.
    pub config: Arc<Config>,
    /// The in-flight caps in force (derived from the memory budget, or `max_in_flight`).
    pub caps: Arc<crate::admission::Caps>,
}

impl crate::auth::HasConfig for AppState {
    fn config(&self) -> &Config {
        &self.config
    }
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

/// The body as bytes, whose rejections (over the body limit, unreadable) are problem+json.
pub struct ApiBytes(pub axum::body::Bytes);

impl<S: Send + Sync> FromRequest<S> for ApiBytes {
    type Rejection = AppError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        match axum::body::Bytes::from_request(req, state).await {
            Ok(bytes) => Ok(ApiBytes(bytes)),
            Err(e) if e.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE => Err(AppError::BodyTooLarge),
            Err(e) => Err(AppError::BadRequest(format!("cannot read the body: {}", e.body_text()))),
        }
    }
}

/// A key's value from the body: at most `max_value_bytes` (413 naming the limit past it), as
/// every other limit is checked, in an extractor, before the handler runs.
pub struct ValueBody(pub axum::body::Bytes);

impl<S: crate::auth::HasConfig> FromRequest<S> for ValueBody {
    type Rejection = AppError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let ApiBytes(value) = ApiBytes::from_request(req, state).await?;
        let max = state.config().max_value_bytes;
        match value.len() {
            got if got > max => Err(AppError::ValueTooLarge { max, got }),
            _ => Ok(ValueBody(value)),
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

/// The filter and key of `/v1/filters/{filter}/keys/{key}`, read from the path as sent (not
/// axum's lenient decoding) and decoded with the filter core's `decode_path_key`, the edge's
/// own decoder: edge and origin read a URL as the same key or both refuse it, so the edge never
/// answers "no" about another key than the one the origin stored. Rejections are problem+json
/// 400s with the reason (malformed `%`-escape, not UTF-8, NUL, `.`/`..`, too long).
pub struct KeyPath {
    /// The filter name, then the decoded key, in one buffer (one allocation a request).
    text: String,
    /// Where the key starts in `text`.
    key_at: usize,
}

impl KeyPath {
    /// The filter name (checked: no escapes, as at the edge).
    pub fn filter(&self) -> &str {
        &self.text[..self.key_at]
    }

    /// The key, decoded; its UTF-8 bytes are what the key format normalises.
    pub fn key(&self) -> &str {
        &self.text[self.key_at..]
    }
}

impl<S: Send + Sync> FromRequestParts<S> for KeyPath {
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        let route = parts.extensions.get::<MatchedPath>().map_or("", MatchedPath::as_str);
        let read = KeyPathRef::read(route, parts.uri.path())?;
        let mut text = String::with_capacity(read.filter.len() + read.key.len());
        text.push_str(read.filter);
        text.push_str(&read.key);
        Ok(KeyPath { text, key_at: read.filter.len() })
    }
}

/// A [`KeyPath`] borrowed from the request's path: the key is decoded into a buffer of its own
/// only when it has escapes, so a lookup that can borrow the request allocates nothing for it.
pub struct KeyPathRef<'a> {
    filter: &'a str,
    key: Cow<'a, str>,
}

impl<'a> KeyPathRef<'a> {
    /// The filter and key of `path` (a request's path as sent), matched by the route pattern
    /// `route`, or the 400 that refuses them.
    pub fn read(route: &str, path: &'a str) -> Result<KeyPathRef<'a>, AppError> {
        // Route parameters are whole segments, so the raw value sits in the path's segment at
        // the parameter's place in the matched route.
        // One pass over both (every lookup reads its path here).
        let (mut filter, mut key) = (None, None);
        for (pattern, segment) in route.split('/').zip(path.split('/')) {
            match pattern {
                "{filter}" => filter = filter.or(Some(segment)),
                "{key}" => key = key.or(Some(segment)),
                _ => {}
            }
        }
        let (Some(filter), Some(key)) = (filter, key) else {
            return Err(AppError::BadRequest("the path names no filter and key".into()));
        };
        validate_filter_name(filter)?;
        let key = decode_path_key_borrowed(key).map_err(|e| AppError::BadRequest(e.to_string()))?;
        Ok(KeyPathRef { filter, key })
    }

    /// The filter name (checked: no escapes, as at the edge).
    pub fn filter(&self) -> &str {
        self.filter
    }

    /// The key, decoded; its UTF-8 bytes are what the key format normalises.
    pub fn key(&self) -> &str {
        &self.key
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::http::StatusCode;
    use axum::response::IntoResponse;
    use axum::routing::get;
    use axum::Router;
    use tower::ServiceExt;

    /// GET `path` on a router whose one route answers with the [`KeyPath`] it extracted.
    async fn extract(path: &str) -> (StatusCode, String) {
        let app = Router::new().route(
            "/v1/filters/{filter}/keys/{key}",
            get(|path: KeyPath| async move { format!("{}|{}", path.filter(), path.key()) }),
        );
        let response = app.oneshot(Request::get(path).body(Body::empty()).unwrap()).await.into_response();
        let status = response.status();
        let body = axum::body::to_bytes(response.into_body(), usize::MAX).await.unwrap();
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    #[tokio::test]
    async fn keys_are_decoded_from_the_raw_path_like_at_the_edge() {
        assert_eq!(extract("/v1/filters/f/keys/a%2Fb").await, (StatusCode::OK, "f|a/b".into()));
        assert_eq!(extract("/v1/filters/f/keys/caf%C3%A9+x").await, (StatusCode::OK, "f|café+x".into()));
        assert_eq!(extract("/v1/filters/f/keys/%2541").await, (StatusCode::OK, "f|%41".into()));
        // Kept as "%+1" by axum's own decoding, read as 0x01 by the old edge: refused by both now.
        for (raw, says) in [
            ("%+1", "malformed %-escape \\\"%+1\\\" at position 0"),
            ("%4", "malformed %-escape"),
            ("%ff", "not valid UTF-8"),
            ("%00", "NUL"),
            ("%2e", "cannot be sent in a URL path"),
            ("%2E%2e", "cannot be sent in a URL path"),
        ] {
            let (status, body) = extract(&format!("/v1/filters/f/keys/{raw}")).await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{raw}: {body}");
            assert!(body.contains(says), "{raw}: {body}");
        }
        let (status, body) = extract("/v1/filters/%66/keys/a").await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "filter names carry no escapes, as at the edge: {body}");
    }
}
