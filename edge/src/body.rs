//! Bodies in and out of wasm memory without growing it needlessly (wasm32 only).
//!
//! The runtime's `bytes()` gathers a streamed body into a vector that doubles as chunks arrive,
//! so a 64 KiB segment lands in a 128 KiB allocation after several smaller ones: memory held
//! twice over and fragmented. Here a body is read whole on the JavaScript side and copied once
//! into a buffer of exactly its length, which a segment takes from the store's spares. A
//! segment put in the Cache API is copied straight from its buffer into a JavaScript array.
//! The edge's own JSON answers are written here too.

use crate::answer;
use crate::batch_body::{BatchBodyError, BoundedBody};
use bloomgate_client::{headers, media};
use futures_util::Stream;
use js_sys::Uint8Array;
use serde::Serialize;
use worker::wasm_bindgen::JsValue;
use worker::wasm_bindgen_futures::JsFuture;
use worker::{web_sys, Cache, Response, Result};

/// The body of `response`, copied into `buffer(len)` resized to its exact length.
pub(crate) async fn read_exact(response: worker::Response, buffer: impl FnOnce(usize) -> Vec<u8>) -> Result<Vec<u8>> {
    let response: web_sys::Response = response.into();
    let body = JsFuture::from(response.array_buffer()?).await?;
    Ok(copy_in(&body, buffer))
}

/// The body of the request being served, read chunk by chunk and refused as soon as it passes
/// `max_bytes`, declared length or not: never held whole before it is judged.
pub(crate) async fn request_bounded(
    request: &mut worker::Request,
    max_bytes: usize,
) -> Result<std::result::Result<Vec<u8>, BatchBodyError>> {
    let mut body = BoundedBody::new(max_bytes);
    if request.inner().body().is_none() {
        return Ok(Ok(body.into_bytes()));
    }
    let mut stream = request.stream()?;
    while let Some(chunk) = std::future::poll_fn(|cx| std::pin::Pin::new(&mut stream).poll_next(cx)).await {
        if let Err(e) = body.push(&chunk?) {
            return Ok(Err(e));
        }
    }
    Ok(Ok(body.into_bytes()))
}

fn copy_in(array_buffer: &JsValue, buffer: impl FnOnce(usize) -> Vec<u8>) -> Vec<u8> {
    let array = Uint8Array::new(array_buffer);
    let len = array.length() as usize;
    let mut out = buffer(len);
    out.resize(len, 0);
    array.copy_to(&mut out);
    out
}

/// A segment's bytes as a JavaScript array (one copy, out of wasm memory), to put in the Cache
/// API later without keeping its buffer.
pub(crate) fn js_copy(bytes: &[u8]) -> Uint8Array {
    Uint8Array::from(bytes)
}

/// Puts a segment (already copied out, [`js_copy`]) in the Cache API under `url`: the edge's
/// own entry, never sent to a client; public, or the Cache API would not keep it; immutable,
/// as the URL names what the copy is (see `cache_copy::segment_cache_url`).
pub(crate) async fn put_in_cache(url: &str, bytes: Uint8Array) -> Result<()> {
    let sent = web_sys::Headers::new()?;
    sent.set(headers::CACHE_CONTROL, "public, max-age=31536000, immutable")?;
    sent.set(headers::CONTENT_TYPE, media::SEGMENT)?;
    let init = web_sys::ResponseInit::new();
    init.set_headers(&sent);
    let response = web_sys::Response::new_with_opt_buffer_source_and_init(Some(&bytes), &init)?;
    Cache::default().put(url, worker::Response::from(response)).await
}

/// A JSON answer with `status` and `content_type`.
pub(crate) fn json<T: Serialize>(body: &T, status: u16, content_type: &str) -> Result<Response> {
    let response = Response::from_json(body)?.with_status(status);
    // `from_json` writes application/json already.
    if content_type != answer::JSON {
        response.headers().set(headers::CONTENT_TYPE, content_type)?;
    }
    Ok(response)
}

/// A problem+json answer (RFC 9457) with the problem's own status.
pub(crate) fn problem(problem: &bloomgate_client::api::Problem) -> Result<Response> {
    json(problem, problem.status, answer::PROBLEM_JSON)
}

/// The origin's problem body for an unknown filter, relayed as it is.
pub(crate) fn relay_not_found(body: &[u8]) -> Result<Response> {
    let r = Response::from_bytes(body.to_vec())?.with_status(404);
    r.headers().set(headers::CONTENT_TYPE, answer::PROBLEM_JSON)?;
    Ok(r)
}
