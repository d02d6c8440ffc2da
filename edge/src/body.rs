//! Bodies in and out of wasm memory without growing it needlessly (wasm32 only).
//!
//! The runtime's `bytes()` gathers a streamed body into a vector that doubles as chunks arrive,
//! so a 64 KiB segment lands in a 128 KiB allocation after several smaller ones: memory held
//! twice over and fragmented. Here a body is read whole on the JavaScript side and copied once
//! into a buffer of exactly its length, which a segment takes from the store's spares. A
//! Cache API entry is read the same way, its header apart, so its segment still lands in a
//! buffer of the segment's size; one put there is copied straight from the segment's buffer
//! into a JavaScript array behind its header. The edge's own JSON answers are written here too.

use crate::answer;
use crate::batch_body::{BatchBodyError, BoundedBody};
use crate::cache_entry::{EntryHeader, EntryRefused, ENTRY_HEADER_BYTES};
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

/// A Cache API entry: its header, read and checked ([`EntryHeader::read`]) before anything is
/// copied into wasm memory, then its content in `buffer(len)` resized to the content's exact
/// length. The MAC is the caller's to verify.
pub(crate) async fn read_entry(
    response: worker::Response,
    max_content: usize,
    buffer: impl FnOnce(usize) -> Vec<u8>,
) -> Result<std::result::Result<(EntryHeader, Vec<u8>), EntryRefused>> {
    let response: web_sys::Response = response.into();
    let array = Uint8Array::new(&JsFuture::from(response.array_buffer()?).await?);
    let len = array.length() as usize;
    let mut head = [0u8; ENTRY_HEADER_BYTES];
    let head = &mut head[..len.min(ENTRY_HEADER_BYTES)];
    array.subarray(0, head.len() as u32).copy_to(head);
    let header = match EntryHeader::read(head, len, max_content) {
        Ok(header) => header,
        Err(why) => return Ok(Err(why)),
    };
    let mut content = buffer(header.content_len());
    content.resize(header.content_len(), 0);
    array.subarray(ENTRY_HEADER_BYTES as u32, len as u32).copy_to(&mut content);
    Ok(Ok((header, content)))
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

/// A Cache API entry as a JavaScript array: `header` ([`crate::cache_entry::seal`]) then
/// `content`, copied once out of wasm memory, to put later without keeping the content's buffer.
pub(crate) fn js_entry(header: &[u8; ENTRY_HEADER_BYTES], content: &[u8]) -> Uint8Array {
    let entry = Uint8Array::new_with_length((ENTRY_HEADER_BYTES + content.len()) as u32);
    entry.subarray(0, ENTRY_HEADER_BYTES as u32).copy_from(header);
    entry.subarray(ENTRY_HEADER_BYTES as u32, entry.length()).copy_from(content);
    entry
}

/// Puts an entry (already copied out, [`js_entry`]) in the Cache API under `url`, the cache key
/// its MAC names: the edge's own entry, never sent to a client; public, or the Cache API would
/// not keep it; immutable, as the URL names what the copy is (see
/// `cache_copy::segment_cache_url`).
pub(crate) async fn put_in_cache(url: &str, entry: Uint8Array) -> Result<()> {
    let sent = web_sys::Headers::new()?;
    sent.set(headers::CACHE_CONTROL, "public, max-age=31536000, immutable")?;
    // Not a segment as the origin serves it: a segment behind an entry header.
    sent.set(headers::CONTENT_TYPE, media::OCTET_STREAM)?;
    let init = web_sys::ResponseInit::new();
    init.set_headers(&sent);
    let response = web_sys::Response::new_with_opt_buffer_source_and_init(Some(&entry), &init)?;
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
