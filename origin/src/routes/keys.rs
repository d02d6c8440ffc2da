//! `/v1/filters/{filter}/keys/...` and `/lookups`: the public lookup API and the writers' API.

use super::batch::KeysBatch;
use super::refusals::{Busy, NoToken, NotAWriter};
use super::{ApiPath, AppState, KeyPath, ValueBody};
use crate::auth::Writer;
use crate::error::AppError;
use crate::gate::Answer;
use axum::extract::State;
use axum::http::{header, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::{Json, Router};
use base64::Engine;
use bloomgate_client::api::{KeyAnswer, KeyDeleted, KeyStored, Keys, KeysStored, Lookups, Problem, StoredValue};
use bloomgate_client::{caching, headers, media, paths};
use std::time::Instant;

/// The answered-by header's name, made once: a name given as text is parsed and copied into a
/// new allocation on every insert.
const ANSWERED_BY: HeaderName = HeaderName::from_static(headers::ANSWERED_BY);

/// The single-key lookup as a plain route. Served through its lane (`lookup_lane`), which adds
/// admission and the request metrics without layers; the lane's golden test puts this behind
/// the layers to compare.
pub fn lookup_router() -> Router<AppState> {
    Router::new().route(paths::KEY, get(lookup))
}

/// The other routes of this resource.
pub fn router() -> Router<AppState> {
    Router::new()
        .route(paths::KEY, put(insert).delete(delete))
        .route(paths::LOOKUPS, post(lookup_batch))
        .route(paths::KEYS, post(insert_batch))
}

fn key_answer(filter: &str, key: &str, answer: &Answer) -> KeyAnswer {
    let value = answer.value.as_deref().filter(|v| !v.is_empty()).map(|value| match std::str::from_utf8(value) {
        Ok(text) => StoredValue::Text(text.to_owned()),
        Err(_) => StoredValue::Binary { base64: base64::engine::general_purpose::STANDARD.encode(value) },
    });
    KeyAnswer {
        filter: filter.to_owned(),
        key: key.to_owned(),
        seen: answer.seen,
        answered_by: answer.answered_by,
        value,
    }
}

/// A [`KeyAnswer`] without a value, borrowed: what every "no" writes, byte for byte as
/// `KeyAnswer` writes it, into a buffer of about its size, with no copy of the filter or key.
#[derive(serde::Serialize)]
struct BareAnswer<'a> {
    filter: &'a str,
    key: &'a str,
    seen: bool,
    answered_by: bloomgate_client::api::AnsweredBy,
}

impl BareAnswer<'_> {
    /// The JSON body, in one allocation of its exact size: written on the stack first (a
    /// buffer's spare capacity would make the body copy itself into a second allocation),
    /// or, for a filter and key too long for the stack's buffer, into a growing one.
    fn to_json(&self) -> axum::body::Body {
        let mut stack = [0u8; 512];
        let mut cursor = std::io::Cursor::new(&mut stack[..]);
        if serde_json::to_writer(&mut cursor, self).is_ok() {
            let written = usize::try_from(cursor.position()).unwrap_or(0);
            return axum::body::Body::from(axum::body::Bytes::copy_from_slice(&stack[..written]));
        }
        let mut out = Vec::with_capacity(64 + self.filter.len() + self.key.len());
        // Writing into a Vec cannot fail, and these fields always serialise.
        serde_json::to_writer(&mut out, self).expect("a bare answer serialises");
        axum::body::Body::from(out)
    }
}

/// Looks one key up: 200 if it is stored, 404 if not (certain when the filter answered).
#[utoipa::path(method(get, head), path = paths::KEY, tag = "keys",
    params(("filter" = String, Path), ("key" = String, Path, description = "in the filter's key format, one path segment (percent-encoded)")),
    responses(
        (status = 200, description = "stored (HEAD: no body; x-bloomgate-answered-by says who answered)", body = KeyAnswer),
        (status = 404, description = "not stored: a KeyAnswer with seen false (certain). A filter that does not exist or was dropped is a Problem instead (application/problem+json)", body = KeyAnswer),
        (status = 400, description = "a key not in the filter's format, a malformed filter name or path", body = Problem, content_type = media::PROBLEM_JSON),
        (status = 503, description = "the database could not answer: unknown, not absent; retry after Retry-After", body = Problem, content_type = media::PROBLEM_JSON),
        Busy,
    ))]
pub(super) async fn lookup(State(s): State<AppState>, path: KeyPath) -> Result<Response, AppError> {
    answer_lookup(&s, path.filter(), path.key(), Instant::now()).await
}

/// What [`lookup`] answers about `key` in `filter`, asked at `arrived`, from borrowed state and
/// path (the lookup lane's are never cloned or copied, and its clock read is reused).
pub(super) async fn answer_lookup(
    s: &AppState,
    filter: &str,
    key: &str,
    arrived: Instant,
) -> Result<Response, AppError> {
    let answer = s.gate.lookup_arrived(filter, key.as_bytes(), arrived).await?;
    let status = if answer.seen { StatusCode::OK } else { StatusCode::NOT_FOUND };
    let mut response = match answer.value.as_deref().filter(|v| !v.is_empty()) {
        None => {
            let body = BareAnswer { filter, key, seen: answer.seen, answered_by: answer.answered_by };
            (status, [(header::CONTENT_TYPE, HeaderValue::from_static(media::JSON))], body.to_json()).into_response()
        }
        Some(_) => (status, Json(key_answer(filter, key, &answer))).into_response(),
    };
    let h = response.headers_mut();
    h.insert(ANSWERED_BY, HeaderValue::from_static(answer.answered_by.as_str()));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static(caching::LOOKUP));
    Ok(response)
}

/// Looks a batch of keys up (at most `max_batch`), answers in the order asked.
#[utoipa::path(post, path = paths::LOOKUPS, tag = "keys", params(("filter" = String, Path)),
    request_body = Keys,
    responses(
        (status = 200, description = "one answer per key, in the order asked", body = Lookups),
        (status = 400, description = "a body that is not {\"keys\": [...]} JSON, a key not in the filter's format (the problem names its index)", body = Problem, content_type = media::PROBLEM_JSON),
        (status = 404, description = "no such filter (or it was dropped)", body = Problem, content_type = media::PROBLEM_JSON),
        (status = 413, description = "more keys than max_batch, or a body over the limit", body = Problem, content_type = media::PROBLEM_JSON),
        (status = 503, description = "the database could not answer, or the request took too long; retry after Retry-After", body = Problem, content_type = media::PROBLEM_JSON),
        Busy,
    ))]
pub(super) async fn lookup_batch(
    State(s): State<AppState>,
    ApiPath(filter): ApiPath<String>,
    KeysBatch(keys): KeysBatch,
) -> Result<Response, AppError> {
    let answers = s.gate.lookup_many(&filter, &keys).await?;
    let results = keys.iter().zip(&answers).map(|(k, a)| key_answer(&filter, k, a)).collect();
    let caching = [(header::CACHE_CONTROL, caching::LOOKUP)];
    Ok((caching, Json(Lookups { filter, results })).into_response())
}

/// Stores one key; the body is its value (may be empty, at most `max_value_bytes`).
/// Acknowledged (201) only once the key is in the database and the filter.
#[utoipa::path(put, path = paths::KEY, tag = "writes",
    params(("filter" = String, Path), ("key" = String, Path)),
    request_body(content = Vec<u8>, content_type = media::OCTET_STREAM, description = "the value (may be empty)"),
    responses(
        (status = 201, description = "stored: in the filter and the database", body = KeyStored),
        (status = 400, description = "a key not in the filter's format, a malformed path or Authorization header", body = Problem, content_type = media::PROBLEM_JSON),
        (status = 404, description = "no such filter (or it was dropped while the write ran: not stored)", body = Problem, content_type = media::PROBLEM_JSON),
        (status = 413, description = "a value over max_value_bytes, or a body over the limit", body = Problem, content_type = media::PROBLEM_JSON),
        (status = 503, description = "not stored (the filter or the database is unavailable, or the filter was dropped and created again meanwhile); retry after Retry-After", body = Problem, content_type = media::PROBLEM_JSON),
        NoToken, NotAWriter, Busy,
    ),
    security(("writer_token" = [])))]
pub(super) async fn insert(
    _: Writer,
    State(s): State<AppState>,
    path: KeyPath,
    ValueBody(value): ValueBody,
) -> Result<Response, AppError> {
    let (filter, key) = (path.filter(), path.key());
    s.gate.insert(filter, key.as_bytes(), &value).await?;
    Ok((StatusCode::CREATED, Json(KeyStored { filter: filter.into(), key: key.into(), stored: true })).into_response())
}

/// Stores a batch of keys (without values), all acknowledged or none.
#[utoipa::path(post, path = paths::KEYS, tag = "writes", params(("filter" = String, Path)),
    request_body = Keys,
    responses(
        (status = 200, description = "all stored", body = KeysStored),
        (status = 400, description = "a body that is not {\"keys\": [...]} JSON, a key not in the filter's format, a malformed Authorization header", body = Problem, content_type = media::PROBLEM_JSON),
        (status = 404, description = "no such filter (or it was dropped while the write ran: none stored)", body = Problem, content_type = media::PROBLEM_JSON),
        (status = 413, description = "more keys than max_batch, or a body over the limit", body = Problem, content_type = media::PROBLEM_JSON),
        (status = 503, description = "none stored; retry after Retry-After", body = Problem, content_type = media::PROBLEM_JSON),
        NoToken, NotAWriter, Busy,
    ),
    security(("writer_token" = [])))]
pub(super) async fn insert_batch(
    _: Writer,
    State(s): State<AppState>,
    ApiPath(filter): ApiPath<String>,
    KeysBatch(keys): KeysBatch,
) -> Result<Json<KeysStored>, AppError> {
    let stored = s.gate.insert_batch(&filter, &keys).await?;
    Ok(Json(KeysStored { filter, stored }))
}

/// Deletes one key (its bits stay set until a rebuild: a "maybe", never a wrong "no").
#[utoipa::path(delete, path = paths::KEY, tag = "writes",
    params(("filter" = String, Path), ("key" = String, Path)),
    responses(
        (status = 200, description = "deleted, or was not stored: deleted says which", body = KeyDeleted),
        (status = 400, description = "a key not in the filter's format, a malformed path or Authorization header", body = Problem, content_type = media::PROBLEM_JSON),
        (status = 404, description = "no such filter", body = Problem, content_type = media::PROBLEM_JSON),
        (status = 503, description = "the database could not answer; retry after Retry-After", body = Problem, content_type = media::PROBLEM_JSON),
        NoToken, NotAWriter, Busy,
    ),
    security(("writer_token" = [])))]
pub(super) async fn delete(_: Writer, State(s): State<AppState>, path: KeyPath) -> Result<Json<KeyDeleted>, AppError> {
    let (filter, key) = (path.filter(), path.key());
    let deleted = s.gate.delete(filter, key.as_bytes()).await?;
    Ok(Json(KeyDeleted { filter: filter.into(), key: key.into(), deleted }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bloomgate_client::api::AnsweredBy;

    #[tokio::test]
    async fn a_bare_answer_writes_what_a_key_answer_writes() {
        let long = "k".repeat(1024);
        for (filter, key, seen, by) in [
            ("f", "ab12", false, AnsweredBy::Filter),
            ("users-2026", "caf\u{e9} \"quoted\" \\ /\n\u{1}", true, AnsweredBy::Database),
            ("x", long.as_str(), false, AnsweredBy::Edge),
        ] {
            let bare = BareAnswer { filter, key, seen, answered_by: by };
            let body = axum::body::to_bytes(bare.to_json(), usize::MAX).await.unwrap();
            let whole = KeyAnswer { filter: filter.into(), key: key.into(), seen, answered_by: by, value: None };
            assert_eq!(body, serde_json::to_vec(&whole).unwrap(), "{key:?}");
        }
    }
}
