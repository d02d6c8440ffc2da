//! One error type for every handler, rendered as `application/problem+json` with a hint for the
//! person reading it. Server-side causes are logged, never sent.

use crate::store::{DatabaseError, FilterUnavailable};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use bloomgate_client::api::{BatchKeysError, Problem};
use bloomgate_client::{caching, media};
use bloomgate_filter::{FilterNameError, KeyError, ParamsError};

/// Everything a request can fail with.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    /// The key does not fit the filter's key format.
    #[error("{0}")]
    BadKey(#[from] KeyError),
    /// The filter name is malformed.
    #[error("{0}")]
    BadFilterName(#[from] FilterNameError),
    /// Filter parameters are out of range.
    #[error("{0}")]
    BadParams(#[from] ParamsError),
    /// The filter asked for is larger than this origin allows.
    #[error("{0}")]
    FilterTooLarge(#[from] crate::sizing::SizeError),
    /// Any other malformed request (JSON, headers, path).
    #[error("{0}")]
    BadRequest(String),
    /// The named filter does not exist.
    #[error("no filter named {0:?}")]
    UnknownFilter(String),
    /// A batch over the configured limit.
    #[error("{}", BatchKeysError::too_many_detail(*max, *got))]
    BatchTooLarge {
        /// The most keys a batch may hold (`max_batch`).
        max: usize,
        /// Keys in the batch (counted past the limit, not kept).
        got: usize,
    },
    /// A value over the configured limit.
    #[error("value is {got} bytes; at most {max} are accepted")]
    ValueTooLarge {
        /// The most bytes a value may hold (`max_value_bytes`).
        max: usize,
        /// The value's bytes as sent.
        got: usize,
    },
    /// The request body is over the configured limit.
    #[error("request body is too large")]
    BodyTooLarge,
    /// No credentials.
    #[error("this endpoint needs a bearer token")]
    Unauthorized,
    /// Wrong credentials.
    #[error("the token is not accepted for this endpoint")]
    Forbidden,
    /// An ops token on an endpoint that writes.
    #[error("an ops token is read-only: it may read stats and the filter list, not write")]
    ReadOnlyToken,
    /// A filter with that name exists with other settings.
    #[error("{0}")]
    Conflict(String),
    /// The requested generation or segment does not exist (edge endpoints).
    #[error("{0}")]
    NotFound(String),
    /// The filter could not take a write, so the write was not done.
    #[error("filter unavailable for writes: {0}")]
    FilterWrite(FilterUnavailable),
    /// The filter could not serve segments or stats.
    #[error("filter unavailable: {0}")]
    FilterRead(FilterUnavailable),
    /// A drop stopped part-way: the filter store did not answer, or the filter's state kept
    /// changing under it. Asking again finishes it.
    #[error("the drop did not finish: {0}")]
    DropStopped(FilterUnavailable),
    /// The database failed: the answer is unknown.
    #[error("database unavailable: {0}")]
    Database(#[from] DatabaseError),
    /// Above the in-flight cap.
    #[error("overloaded")]
    Overloaded,
    /// The request ran past its timeout.
    #[error("timed out")]
    Timeout,
    /// The cluster was upgraded past what this origin knows: it changes nothing.
    #[error("the cluster is at version {found}, newer than this origin knows ({known}): nothing was changed")]
    ClusterAhead {
        /// The cluster's version.
        found: u32,
        /// The newest this build knows.
        known: u32,
    },
}

impl AppError {
    /// The status, the hint for the person reading it, and the detail (the error itself for
    /// the caller's mistakes; never a server-side cause, which is logged instead).
    fn parts(&self) -> (StatusCode, &'static str, String) {
        (self.status(), self.hint(), self.detail())
    }

    fn status(&self) -> StatusCode {
        use AppError::*;
        match self {
            BadKey(_) | BadFilterName(_) | BadParams(_) | FilterTooLarge(_) | BadRequest(_) => StatusCode::BAD_REQUEST,
            UnknownFilter(_) | NotFound(_) => StatusCode::NOT_FOUND,
            BatchTooLarge { .. } | ValueTooLarge { .. } | BodyTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Unauthorized => StatusCode::UNAUTHORIZED,
            Forbidden | ReadOnlyToken => StatusCode::FORBIDDEN,
            Conflict(_) => StatusCode::CONFLICT,
            FilterWrite(_) | FilterRead(_) | DropStopped(_) | Database(_) | Timeout | ClusterAhead { .. } => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            Overloaded => StatusCode::TOO_MANY_REQUESTS,
        }
    }

    fn hint(&self) -> &'static str {
        use AppError::*;
        match self {
            BadKey(_) => "Check the key against the filter's key_format (GET .../stats shows it).",
            BadFilterName(_) => "Filter names are 1-64 characters of a-z, 0-9, '-' and '_'.",
            BadParams(_) => "Choose capacity >= 1 and 0 < fp_rate < 1, e.g. {\"capacity\": 1000000, \"fp_rate\": 0.01}.",
            FilterTooLarge(_) => "Ask for a smaller capacity or a higher fp_rate (or larger segments), or raise max_filter_bytes in the origin's configuration.",
            BadRequest(_) => "See the API section of the README for the request shape.",
            UnknownFilter(_) => "Create it with PUT /v1/filters/{filter} first, or check the name.",
            BatchTooLarge { .. } => BatchKeysError::TOO_MANY_HINT,
            ValueTooLarge { .. } => "Store large values elsewhere and keep a reference here.",
            BodyTooLarge => "Send smaller batches or values (see max_batch and max_value_bytes).",
            Unauthorized => "Send 'Authorization: Bearer <token>' with a writer token (or, to read stats and the filter list, an ops token) from the origin's config.",
            Forbidden => "Use a token listed in writer_tokens, or in ops_tokens for stats and the filter list (the edge secret for edge endpoints).",
            ReadOnlyToken => "Use a writer token (writer_tokens) to create, write, delete, rebuild or drop.",
            Conflict(_) => "Use another name, or the existing settings.",
            NotFound(_) => "Fetch the manifest again: it names the current generation and segments.",
            FilterWrite(FilterUnavailable::UnknownFormat { .. })
            | FilterRead(FilterUnavailable::UnknownFormat { .. })
            | DropStopped(FilterUnavailable::UnknownFormat { .. }) => {
                "Nothing was changed: a newer bloomgate origin wrote this filter's state, in a format this origin does not read. Finish the upgrade (docs/operations.md, \"Upgrading\"); lookups still work meanwhile."
            }
            FilterWrite(_) => "Nothing was stored. Retry after the delay; the filter store (Redis) is down or missing this filter.",
            FilterRead(_) => "Retry after the delay; lookups still work meanwhile.",
            DropStopped(_) => "Send the drop again after the delay: it finishes what this one began (every step is idempotent).",
            Database(DatabaseError::UnknownFormat { .. }) => {
                "Nothing was read or changed: a newer bloomgate origin wrote this filter's definition or drop record, in a format this origin does not read. Upgrade this origin (docs/operations.md, \"Schema\")."
            }
            Database(_) => "Retry after the delay. The answer is unknown, not 'absent'.",
            Overloaded => "Retry after the delay, or spread the load.",
            Timeout => "Retry after the delay.",
            ClusterAhead { .. } => "Send it to an origin of the newer release, or upgrade this one (docs/operations.md, \"Upgrading\"); lookups still work here meanwhile.",
        }
    }

    fn detail(&self) -> String {
        use AppError::*;
        match self {
            FilterWrite(_) => "the filter could not record the key, so the write was not done".into(),
            FilterRead(_) => "the filter store (Redis) is unavailable".into(),
            DropStopped(_) => {
                "the drop did not finish: the filter store did not answer, or the filter's state kept changing".into()
            }
            // Names the caller's filter and two format numbers: nothing of the server's.
            Database(e @ DatabaseError::UnknownFormat { .. }) => e.to_string(),
            Database(_) => "the database did not answer".into(),
            Overloaded => "too many requests in flight".into(),
            Timeout => "the request took too long".into(),
            // Two version numbers: nothing of the server's internals.
            ClusterAhead { .. } => self.to_string(),
            // The caller's own mistakes: the error says exactly what was wrong.
            BadKey(_)
            | BadFilterName(_)
            | BadParams(_)
            | FilterTooLarge(_)
            | BadRequest(_)
            | UnknownFilter(_)
            | BatchTooLarge { .. }
            | ValueTooLarge { .. }
            | BodyTooLarge
            | Unauthorized
            | Forbidden
            | ReadOnlyToken
            | Conflict(_)
            | NotFound(_) => self.to_string(),
        }
    }
}

/// Seconds to put in `Retry-After`; set once from config at start-up.
static RETRY_AFTER_SECS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// Sets the `Retry-After` value used by every 429/503.
pub fn set_retry_after(secs: u64) {
    RETRY_AFTER_SECS.store(secs.max(1), std::sync::atomic::Ordering::Relaxed);
}

impl IntoResponse for AppError {
    fn into_response(self) -> Response {
        let (status, hint, detail) = self.parts();
        if status.is_server_error() {
            tracing::warn!(cause = %self, status = status.as_u16(), "request failed");
        }
        let body = Problem::new(status.as_u16(), detail).with_hint(hint);
        let mut response = (status, body.to_json()).into_response();
        let headers = response.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(media::PROBLEM_JSON));
        // An error describes a moment (see `caching::LOOKUP`): no cache on the way may keep it.
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static(caching::LOOKUP));
        if status == StatusCode::TOO_MANY_REQUESTS || status == StatusCode::SERVICE_UNAVAILABLE {
            let secs = RETRY_AFTER_SECS.load(std::sync::atomic::Ordering::Relaxed);
            headers.insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        response
    }
}

/// A rebuild that could not start, as the caller sees it: their mistakes are 4xx, the stores'
/// failures 503 (the cause logged, not sent).
impl From<crate::rebuild::RebuildError> for AppError {
    fn from(e: crate::rebuild::RebuildError) -> AppError {
        use crate::rebuild::RebuildError;
        match e {
            RebuildError::Busy => AppError::Conflict(
                "a rebuild of this filter is already running (perhaps on another origin): its progress is in the filter's stats".into(),
            ),
            RebuildError::UnknownFilter(name) => AppError::UnknownFilter(name),
            RebuildError::Params(e) => AppError::BadParams(e),
            RebuildError::TooLarge(e) => AppError::FilterTooLarge(e),
            RebuildError::Filter(e) => AppError::FilterWrite(e),
            RebuildError::Keys(e) => AppError::Database(e),
            RebuildError::ClusterAhead { found, known } => AppError::ClusterAhead { found, known },
            e @ (RebuildError::Alloc(_) | RebuildError::LeaseLost) => {
                AppError::FilterWrite(FilterUnavailable::Error(e.to_string()))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unavailable_database_is_503_with_retry_after_and_no_internals() {
        let response = AppError::Database(DatabaseError::Error("node 10.0.0.7 secret stack".into())).into_response();
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert!(response.headers().contains_key(header::RETRY_AFTER));
        assert_eq!(response.headers()[header::CONTENT_TYPE], "application/problem+json");
        let detail = AppError::Database(DatabaseError::Error("node 10.0.0.7".into())).parts().2;
        assert!(!detail.contains("10.0.0.7"));
    }

    #[test]
    fn a_definition_in_a_newer_format_is_503_saying_to_upgrade() {
        let err = AppError::Database(DatabaseError::UnknownFormat {
            filter: "files".into(),
            record: "definition",
            found: 2,
            known: 1,
        });
        let (status, hint, detail) = err.parts();
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert!(detail.contains("\"files\"") && detail.contains("format 2") && detail.contains("upgrade this origin"));
        assert!(hint.contains("Upgrade this origin"), "{hint}");
    }

    #[test]
    fn no_error_answer_may_be_kept_by_a_cache() {
        for err in [
            AppError::Overloaded,
            AppError::Timeout,
            AppError::UnknownFilter("f".into()),
            AppError::BatchTooLarge { max: 1, got: 2 },
            AppError::BadRequest("x".into()),
            AppError::Unauthorized,
        ] {
            let response = err.into_response();
            assert_eq!(response.headers()[header::CACHE_CONTROL], "no-store", "{}", response.status());
        }
    }

    #[test]
    fn bad_key_is_400_with_the_exact_reason() {
        let err = AppError::BadKey(KeyError::WrongHexLength { expected: 64, got: 63 });
        let (status, _, detail) = err.parts();
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert_eq!(detail, "key must be 64 hex digits, got 63");
    }
}
