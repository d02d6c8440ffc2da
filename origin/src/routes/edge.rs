//! Endpoints for the edge: the manifest and immutable, versioned segments, the journal, and the
//! shared feed's sealed chunk pages. Behind the edge secret (a header, or for the shared feed a
//! path token derived from it): segments reveal which keys are stored, so they are not public.

use super::{ApiPath, AppState};
use crate::auth::Edge;
use crate::error::AppError;
use crate::gate::Refusal;
use crate::metrics::EdgeKind;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use bloomgate_client::feed_token::{feed_token_matches, CURRENT_GENERATION};
use bloomgate_client::paths::{self, JournalQuery};
use bloomgate_client::{caching, headers, media};

/// Routes of this resource.
pub fn router() -> Router<AppState> {
    Router::new()
        .route(paths::MANIFEST, get(manifest))
        .route(paths::SEGMENT, get(segment))
        .route(paths::JOURNAL, get(journal))
        .route(paths::SEALED_PAGE, get(sealed_page))
        .route(paths::EPOCH_SEGMENT, get(epoch_segment))
        .route(paths::FEED_CURRENT, get(feed_current))
}

async fn manifest(_: Edge, State(s): State<AppState>, ApiPath(filter): ApiPath<String>) -> Result<Response, AppError> {
    s.gate.metrics.edge_feed.served(EdgeKind::Manifest);
    let manifest = s.gate.manifest(&filter).await?;
    let mut response = Json(manifest).into_response();
    response.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static(caching::EDGE_FEED));
    Ok(response)
}

async fn segment(
    _: Edge,
    State(s): State<AppState>,
    headers: HeaderMap,
    ApiPath((filter, generation, index)): ApiPath<(String, u64, u32)>,
) -> Result<Response, AppError> {
    s.gate.metrics.edge_feed.served(EdgeKind::Segment);
    let (version, wire) = s.gate.segment(&filter, generation, index).await?;
    let etag = format!("\"{generation}-{index}-{version}\"");
    if headers.get(header::IF_NONE_MATCH).is_some_and(|v| v.as_bytes() == etag.as_bytes()) {
        return Ok((axum::http::StatusCode::NOT_MODIFIED, [(header::ETAG, etag)]).into_response());
    }
    // Immutable per (generation, index, version): see `caching::SEGMENT` for why.
    let mut response = wire.into_response();
    let h = response.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(media::SEGMENT));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static(caching::SEGMENT));
    h.insert(header::ETAG, HeaderValue::from_str(&etag).map_err(|e| AppError::BadRequest(e.to_string()))?);
    h.insert(headers::SEGMENT_VERSION, HeaderValue::from(version));
    Ok(response)
}

/// Journal entries a chunk carries at most: bounds the response (16 bytes a key hash); an
/// edge further behind asks again from where the chunk ends.
const MAX_JOURNAL_ENTRIES: u32 = 16_384;

/// The insert journal after a position: 200 with a chunk (`bloomgate_filter::journal`), the
/// head and the readable generation in headers; or 410 when the entries are no longer kept (the
/// edge fetches its segments whole).
async fn journal(
    _: Edge,
    State(s): State<AppState>,
    ApiPath((filter, generation)): ApiPath<(String, u64)>,
    query: Result<axum::extract::Query<JournalQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, AppError> {
    let axum::extract::Query(query) = query.map_err(|e| {
        AppError::BadRequest(format!("journal query: {}; expected ?after=N&after_id=MS-SEQ", e.body_text()))
    })?;
    let after = query
        .position()
        .ok_or_else(|| AppError::BadRequest("after_id must be a stream id MS-SEQ, e.g. 1700000000000-0".into()))?;
    s.gate.metrics.edge_feed.served(EdgeKind::Journal);
    let Some(chunk) = s.gate.journal(&filter, generation, after, MAX_JOURNAL_ENTRIES).await? else {
        let mut gone = (
            axum::http::StatusCode::GONE,
            "the journal no longer holds the entries after this position: fetch the segments whole",
        )
            .into_response();
        gone.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static(caching::EDGE_FEED));
        return Ok(gone);
    };
    let mut response = chunk.wire.into_response();
    let h = response.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(media::JOURNAL));
    // What lets the edge take a chunk that reaches the head as its next manifest.
    h.insert(headers::JOURNAL_HEAD, HeaderValue::from(chunk.head));
    if let Some(generation) = chunk.readable_generation {
        h.insert(headers::READABLE_GENERATION, HeaderValue::from(generation));
    }
    // The head moves with every write: what a position's chunk holds depends on when it is asked.
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static(caching::EDGE_FEED));
    Ok(response)
}

/// A page of a sealed journal chunk, under the path token of the filter's generation (no
/// header: shared caches key on the URL).
async fn sealed_page(
    State(s): State<AppState>,
    ApiPath((token, filter, generation, width_ms, chunk, page)): ApiPath<(String, String, u64, u64, u64, u32)>,
) -> Result<Response, AppError> {
    authorize_feed(&s, &filter, generation, &token)?;
    s.gate.metrics.edge_feed.served(EdgeKind::SealedPage);
    let answer = s.gate.sealed_page(&filter, generation, width_ms, chunk, page).await?;
    Ok(shared_answer(answer, media::SEALED_PAGE))
}

/// A segment at an epoch (a sealed chunk), under the path token of its generation.
async fn epoch_segment(
    State(s): State<AppState>,
    ApiPath((token, filter, generation, width_ms, epoch, index)): ApiPath<(String, String, u64, u64, u64, u32)>,
) -> Result<Response, AppError> {
    authorize_feed(&s, &filter, generation, &token)?;
    s.gate.metrics.edge_feed.served(EdgeKind::EpochSegment);
    let answer = s.gate.epoch_segment(&filter, generation, width_ms, epoch, index).await?;
    Ok(shared_answer(answer, media::SEGMENT))
}

/// The filter's current document, under the filter's path token.
async fn feed_current(
    State(s): State<AppState>,
    ApiPath((token, filter, width_ms, slot)): ApiPath<(String, String, u64, u64)>,
) -> Result<Response, AppError> {
    authorize_feed(&s, &filter, CURRENT_GENERATION, &token)?;
    s.gate.metrics.edge_feed.served(EdgeKind::FeedCurrent);
    let answer = s.gate.feed_current(&filter, width_ms, slot).await?;
    Ok(match answer {
        Ok(current) => {
            let mut response = Json(current).into_response();
            response.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static(caching::FEED_CURRENT));
            response
        }
        Err(refusal) => shared_answer(Err(refusal), media::JSON),
    })
}

/// A wrong or missing token, or an origin without an edge secret, is answered like an unknown
/// path.
fn authorize_feed(s: &AppState, filter: &str, generation: u64, token: &str) -> Result<(), AppError> {
    let secret = s.config.edge_secret.as_deref().unwrap_or_default();
    match !secret.is_empty() && feed_token_matches(secret.as_bytes(), filter, generation, token) {
        true => Ok(()),
        false => Err(AppError::NotFound("no such feed path".into())),
    }
}

/// The shared feed's answer: what was asked, public and immutable; or why not, never stored.
fn shared_answer(answer: Result<Vec<u8>, Refusal>, media_type: &'static str) -> Response {
    let not_stored = |status: StatusCode, text: &'static str| {
        let mut response = (status, text).into_response();
        response.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static(caching::EDGE_FEED));
        response
    };
    match answer {
        Ok(wire) => {
            let mut response = wire.into_response();
            let h = response.headers_mut();
            h.insert(header::CONTENT_TYPE, HeaderValue::from_static(media_type));
            h.insert(header::CACHE_CONTROL, HeaderValue::from_static(caching::SHARED_FEED));
            response
        }
        Err(Refusal::Open { retry_after_ms }) => {
            let mut response =
                not_stored(StatusCode::TOO_EARLY, "this chunk is not sealed yet: ask again after Retry-After");
            let secs = retry_after_ms.div_ceil(1000).max(1);
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(secs));
            response
        }
        Err(Refusal::Unsealable) => not_stored(
            StatusCode::CONFLICT,
            "Redis's clock stepped back across this chunk's end: keep fresh from the journal instead",
        ),
        Err(Refusal::Gone) => {
            not_stored(StatusCode::GONE, "the journal no longer holds this chunk's entries: fetch the segments whole")
        }
    }
}
