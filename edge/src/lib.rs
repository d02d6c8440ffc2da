//! bloomgate edge: a Cloudflare Worker (Rust compiled to wasm) in front of the origin.
//!
//! A lookup (GET or HEAD) whose key the filter rules out is answered `404` with
//! `{"seen":false,"answered_by":"edge"}` here, from a copy of a filter segment, with no request
//! to the origin; every other lookup (a "maybe", no usable segment, or a manifest that went
//! stale while its segment loaded) is forwarded and the origin's answer relayed, refusals (4xx)
//! included. Keys are decoded from the path by the filter core's `decode_path_key`, as at the
//! origin. Writes are refused (405).
//!
//! # Layout
//! Pure modules (tested natively):
//! - [`route`]: which request is which (lookup, batch, write, health, isolate report).
//! - [`config`]: the worker's settings, parsed once per request into [`config::EdgeConfig`].
//! - [`decide`]: the per-key decision shared by single and batch lookups: which segment, whether
//!   a copy may answer, what it says, whether that "no" still stands when answering.
//! - [`manifest`]: when a manifest may be used and is refreshed, what a journal chunk makes of
//!   it, which one is kept (its I/O in `manifest_fetch`).
//! - [`copy`]: a segment copy and the journal position it is current to.
//! - [`tail`]: the journal's tail kept in the isolate, by segment, to bring any copy forward.
//! - [`catch_up`]: which copies are behind, where journal requests start, how much to read.
//! - [`store`]: copies, spare buffers and tails under one byte budget; one generation per filter.
//! - [`lru`] and [`pool`]: the store's least-recently-used copies and spare segment buffers.
//! - [`cache_copy`]: the Cache API key of a copy, and when a copy is written back there.
//! - [`cache_entry`]: a Cache API entry's format: its content behind a MAC keyed from the edge
//!   secret, bound to its cache key; what is refused.
//! - [`batch_body`]: a batch body bounded while read and parsed (bytes, then keys).
//! - [`answer`]: response bodies (the wire contract's, `bloomgate_client`), which origin answers
//!   are relayed, the origin URL a lookup goes to.
//! - [`report`]: the isolate's report on itself; the log lines when wasm memory grows and when
//!   a Cache API entry is refused.
//! - [`feed_follow`]: following the shared feed (current document, segments at an epoch,
//!   sealed chunks) without I/O, and until when its "no" stands.
//! - [`fleet_counts`]: the isolate's counts as Analytics Engine data points: when one is due,
//!   what it carries (deltas since the last), what those written add up to.
//! - [`flight`]: one fetch at a time per missing manifest, segment or catch-up, without sharing
//!   promises.
//! - [`planted`]: known bugs for the history checker's negative controls (test builds only).
//! - `testing`: small params, positions and manifests the native tests of several modules share.
//!
//! wasm32 only (the Workers runtime):
//! - `glue`: the `#[event]` entry points, routing, the isolate report.
//! - `lookup`: the lookup handlers, single and batch.
//! - `feed`: the shared feed's followers, advanced through the CDN's cache (`SHARED_FEED`).
//! - `manifest_fetch`: a manifest from isolate memory, the journal alone, or the origin.
//! - `segments`: a usable copy from isolate memory, the Cache API or the origin.
//! - `journal_sync`: journal requests: refreshes, catch-ups, the tail.
//! - `isolate`: the isolate's state and the one-fetch-at-a-time machinery.
//! - `body`: bodies read into buffers of their exact size; Cache API entries put and read.
//! - `upstream`: subrequests to the origin, under timeouts; relays and 503s.
//!
//! Build the worker with `scripts/edge-build`; see `edge/README.md`.
#![forbid(unsafe_code)]

pub mod answer;
pub mod batch_body;
pub mod cache_copy;
pub mod cache_entry;
pub mod catch_up;
pub mod config;
pub mod copy;
pub mod decide;
pub mod feed_follow;
pub mod fleet_counts;
pub mod flight;
pub mod lru;
pub mod manifest;
pub mod planted;
pub mod pool;
pub mod report;
pub mod route;
pub mod store;
pub mod tail;

#[cfg(test)]
mod testing;

#[cfg(target_arch = "wasm32")]
mod body;
#[cfg(target_arch = "wasm32")]
mod feed;
#[cfg(target_arch = "wasm32")]
mod glue;
#[cfg(target_arch = "wasm32")]
mod isolate;
#[cfg(target_arch = "wasm32")]
mod journal_sync;
#[cfg(target_arch = "wasm32")]
mod lookup;
#[cfg(target_arch = "wasm32")]
mod manifest_fetch;
#[cfg(target_arch = "wasm32")]
mod segments;
#[cfg(target_arch = "wasm32")]
mod upstream;
