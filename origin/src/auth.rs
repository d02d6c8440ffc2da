//! Who may call what: writer tokens for writes and everything else a token opens, read-only ops
//! tokens for stats and the filter list, the edge secret for the edge's endpoints. The
//! extractors need only the configuration from the app's state ([`HasConfig`]), so this module
//! sits below the routes that use it.

use crate::config::Config;
use crate::error::AppError;
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::HeaderMap;
use bloomgate_client::headers::EDGE_SECRET as EDGE_SECRET_HEADER;
use subtle::ConstantTimeEq;

/// An app state the extractors read the tokens and the edge secret from.
pub trait HasConfig: Send + Sync {
    /// The configuration.
    fn config(&self) -> &Config;
}

/// What a bearer token lets its holder do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// One of `writer_tokens`: writes, creates, drops, rebuilds, and every read.
    Writer,
    /// One of `ops_tokens`: reads a filter's stats and the filter list; never writes.
    Ops,
}

/// A request from a writer: extracting it checks the bearer token. As a handler's first
/// argument it runs before the body is read, so a caller without a token costs no body. An
/// ops token is refused with a 403 that says it cannot write.
pub struct Writer;

impl<S: HasConfig> FromRequestParts<S> for Writer {
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match role_in(parts, state)? {
            Role::Writer => Ok(Writer),
            Role::Ops => Err(AppError::ReadOnlyToken),
        }
    }
}

/// A request from a writer or an ops token, for what either may read (stats, the filter list).
pub struct Reader;

impl<S: HasConfig> FromRequestParts<S> for Reader {
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        role_in(parts, state).map(|_| Reader)
    }
}

/// A request from the edge: extracting it checks the edge secret.
pub struct Edge;

impl<S: HasConfig> FromRequestParts<S> for Edge {
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        require_edge(&parts.headers, state.config().edge_secret.as_deref()).map(|()| Edge)
    }
}

/// The role of the request's bearer token, by the token lists of `state`'s configuration.
fn role_in(parts: &Parts, state: &impl HasConfig) -> Result<Role, AppError> {
    let config = state.config();
    role(&parts.headers, &config.writer_tokens, &config.ops_tokens)
}

/// Compares in time independent of where the inputs differ (length is not secret). `subtle`
/// keeps the optimiser from turning the comparison back into one that stops at the first
/// difference, which a hand-written fold does not guarantee.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    bool::from(a.ct_eq(b))
}

/// Whether `token` is one of `tokens`, checking every one so the time taken does not reveal
/// which one matched.
fn listed(tokens: &[String], token: &str) -> bool {
    tokens.iter().fold(false, |hit, t| constant_time_eq(t.as_bytes(), token.as_bytes()) | hit)
}

/// The role of the request's `Authorization: Bearer <token>`: 401 without one, 400 when it is
/// not a bearer token, 403 when the token is in neither list.
pub fn role(headers: &HeaderMap, writers: &[String], ops: &[String]) -> Result<Role, AppError> {
    let value = headers.get(axum::http::header::AUTHORIZATION).ok_or(AppError::Unauthorized)?;
    let token = value
        .to_str()
        .ok()
        .and_then(|v| v.strip_prefix("Bearer "))
        .ok_or_else(|| AppError::BadRequest("Authorization must be 'Bearer <token>'".into()))?;
    // Both lists are checked whatever the first says: the time taken does not tell them apart.
    let (writer, reader) = (listed(writers, token), listed(ops, token));
    match (writer, reader) {
        (true, _) => Ok(Role::Writer),
        (false, true) => Ok(Role::Ops),
        (false, false) => Err(AppError::Forbidden),
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

    fn bearer(token: &'static str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert("authorization", HeaderValue::from_static(token));
        h
    }

    #[test]
    fn tokens_name_a_role_or_are_refused() {
        let writers = vec!["0123456789abcdef".to_string()];
        let ops = vec!["fedcba9876543210".to_string()];
        assert!(matches!(role(&HeaderMap::new(), &writers, &ops), Err(AppError::Unauthorized)));
        assert!(matches!(role(&bearer("Bearer nope"), &writers, &ops), Err(AppError::Forbidden)));
        assert!(matches!(role(&bearer("Basic 0123456789abcdef"), &writers, &ops), Err(AppError::BadRequest(_))));
        assert_eq!(role(&bearer("Bearer 0123456789abcdef"), &writers, &ops).unwrap(), Role::Writer);
        assert_eq!(role(&bearer("Bearer fedcba9876543210"), &writers, &ops).unwrap(), Role::Ops);
        assert!(matches!(role(&bearer("Bearer 0123456789abcdef"), &[], &[]), Err(AppError::Forbidden)));
        assert!(
            matches!(role(&bearer("Bearer 0123456789abcdef"), &[], &writers), Ok(Role::Ops)),
            "a token's list decides its role, not its text"
        );
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
