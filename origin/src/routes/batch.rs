//! The body of batch requests, `{"keys": [...]}`, read with a bound on the number of keys:
//! keys past `max_batch` are counted, never kept, so an oversized batch is refused without
//! allocating it.

use super::AppState;
use crate::error::AppError;
use axum::extract::{FromRequest, Request};
use axum::http::header::CONTENT_TYPE;
use bloomgate_client::api::{parse_batch_keys, BatchKeysError};
use bloomgate_client::media;

/// The keys of a batch request, at most `max_batch` of them.
pub struct KeysBatch(pub Vec<String>);

impl FromRequest<AppState> for KeysBatch {
    type Rejection = AppError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, Self::Rejection> {
        let is_json = req.headers().get(CONTENT_TYPE).and_then(|v| v.to_str().ok()).is_some_and(media::is_json);
        if !is_json {
            return Err(AppError::BadRequest("send the body as JSON with 'Content-Type: application/json'".into()));
        }
        let super::ApiBytes(body) = super::ApiBytes::from_request(req, state).await?;
        parse_keys(&body, state.config.max_batch).map(KeysBatch)
    }
}

/// Parses `{"keys": [...]}` with at most `max` keys (the wire contract's one parser, as at the
/// edge).
pub fn parse_keys(body: &[u8], max: usize) -> Result<Vec<String>, AppError> {
    parse_batch_keys(body, max).map_err(|e| match e {
        BatchKeysError::TooMany(got) => AppError::BatchTooLarge { max, got },
        BatchKeysError::Invalid(words) => {
            AppError::BadRequest(format!("invalid JSON body: {words}; expected {{\"keys\": [\"...\", ...]}}"))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_within_the_limit_parses() {
        assert_eq!(parse_keys(br#"{"keys":["a","b"]}"#, 2).unwrap(), ["a", "b"]);
        assert_eq!(parse_keys(br#"{"keys":[]}"#, 2).unwrap(), Vec::<String>::new());
    }

    #[test]
    fn keys_past_the_limit_are_counted_for_the_refusal() {
        let err = parse_keys(br#"{"keys":["a","b","c","d"]}"#, 2).unwrap_err();
        assert!(matches!(err, AppError::BatchTooLarge { max: 2, got: 4 }), "{err}");
        assert_eq!(err.to_string(), "batch has 4 keys; at most 2 are accepted per request");
    }

    #[test]
    fn malformed_bodies_say_what_is_expected() {
        for body in [&br#"{"keyz":[]}"#[..], br#"{}"#, br#"{"keys":[1]}"#, br#"["a"]"#, br#"{"keys":["a"]} x"#] {
            let err = parse_keys(body, 5).unwrap_err();
            assert!(matches!(err, AppError::BadRequest(_)), "{}: {err}", String::from_utf8_lossy(body));
        }
    }
}
