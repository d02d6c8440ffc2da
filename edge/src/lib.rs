//! bloomgate edge: a Cloudflare Worker (Rust compiled to wasm) in front of the origin.
//!
//! A lookup (GET or HEAD) whose key the filter rules out is answered `404` with
//! `{"seen":false,"answered_by":"edge"}` here, from a cached filter segment, with no request to the origin; every other lookup (a
//! "maybe", no usable segment, or a manifest that went stale while its segment loaded) is
//! forwarded and the origin's answer relayed, refusals (4xx) included. Keys are decoded from
//! the path by the filter core's `decode_path_key`, as at the origin. Writes are refused (405).
//!
//! # Layout
//! - [`route`]: which request is which (lookup, batch, write, health).
//! - [`decide`]: manifest freshness, segment choice and cache keys, whether a held segment may
//!   answer, what it says, and whether that "no" still stands when answering; how long a fetch
//!   may take.
//! - [`held`]: a held segment with the insert-journal position it is current to, and what a
//!   journal chunk does to it.
//! - [`catch_up`]: bringing held segments up to a manifest's journal head with one request per
//!   filter: which are behind, where it starts, how much to read, when to ask again.
//! - [`answer`]: response bodies (the wire contract's, `bloomgate_client`: the edge's "no" is
//!   the origin's `KeyAnswer`, answered by `edge`), which origin answers are relayed, the origin
//!   URL a lookup goes to.
//! - [`lru`]: the byte-bounded in-isolate segment cache.
//! - [`flight`]: one fetch at a time per missing manifest, segment or catch-up, without sharing
//!   promises.
//! - [`config`]: the worker's settings (`ORIGIN_URL`, `EDGE_SECRET`, `FRESHNESS_SECS`,
//!   `MEMORY_CACHE_MB`, `MAX_BATCH`, `LOG_REQUESTS`), parsed once per request into
//!   [`config::EdgeConfig`].
//! - [`planted`]: known bugs for the history checker's negative controls (test builds only).
//! - `glue` (wasm32 only): the `#[event]` entry points, the handlers and manifests.
//! - `holding` (wasm32 only): segments from isolate memory, the journal, the Cache API or the
//!   origin, and the journal catch-up.
//! - `isolate` (wasm32 only): the isolate's state and the one-fetch-at-a-time machinery.
//! - `upstream` (wasm32 only): subrequests to the origin, under timeouts; relays and 503s.
//!
//! Only the wasm32 modules touch the Workers runtime, so `cargo test -p bloomgate-edge` runs natively.
//! Build the worker with `scripts/edge-build`; see `edge/README.md`.
#![forbid(unsafe_code)]

pub mod answer;
pub mod catch_up;
pub mod config;
pub mod decide;
pub mod flight;
pub mod held;
pub mod lru;
pub mod planted;
pub mod route;

#[cfg(target_arch = "wasm32")]
mod glue;
#[cfg(target_arch = "wasm32")]
mod holding;
#[cfg(target_arch = "wasm32")]
mod isolate;
#[cfg(target_arch = "wasm32")]
mod upstream;
