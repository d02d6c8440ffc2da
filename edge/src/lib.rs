//! bloomgate edge: a Cloudflare Worker (Rust compiled to wasm) in front of the origin.
//!
//! A lookup (GET or HEAD) whose key the filter rules out is answered `404 {"seen":false}`
//! here, from a cached filter segment, with no request to the origin; every other lookup (a
//! "maybe", no usable segment, or a manifest that went stale while its segment loaded) is
//! forwarded and the origin's answer relayed, refusals (4xx) included. Keys are decoded from
//! the path by the filter core's `decode_path_key`, as at the origin. Writes are refused (405).
//!
//! # Layout
//! - [`route`]: which request is which (lookup, batch, write, health).
//! - [`decide`]: manifest freshness, segment choice and cache keys, what a segment says, and
//!   whether that "no" still stands when answering; how long a fetch may take.
//! - [`answer`]: response bodies, which origin answers are relayed, the origin URL a lookup
//!   goes to.
//! - [`lru`]: the byte-bounded in-isolate segment cache.
//! - [`flight`]: one fetch at a time per missing manifest or segment, without sharing promises.
//! - [`config`]: the worker's settings (`ORIGIN_URL`, `EDGE_SECRET`, `FRESHNESS_SECS`,
//!   `MEMORY_CACHE_MB`, `MAX_BATCH`), parsed once per request into [`config::EdgeConfig`].
//! - `glue` (wasm32 only): the `#[event]` entry points, the handlers and the isolate's caches.
//! - `upstream` (wasm32 only): subrequests to the origin, under timeouts; relays and 503s.
//!
//! Only `glue` and `upstream` touch the Workers runtime, so `cargo test -p bloomgate-edge` runs natively.
//! Build the worker with `scripts/edge-build`; see `edge/README.md`.
#![forbid(unsafe_code)]

pub mod answer;
pub mod config;
pub mod decide;
pub mod flight;
pub mod lru;
pub mod route;

#[cfg(target_arch = "wasm32")]
mod glue;
#[cfg(target_arch = "wasm32")]
mod upstream;
