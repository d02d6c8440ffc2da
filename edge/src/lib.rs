//! bloomgate edge: a Cloudflare Worker (Rust compiled to wasm) in front of the origin.
//!
//! A lookup whose key the filter rules out is answered `404 {"seen":false}` here, from a
//! cached filter segment, with no request to the origin; every other lookup (a "maybe", or
//! no usable segment) is forwarded and the origin's answer relayed. Writes are refused (405).
//!
//! # Layout
//! - [`route`]: which request is which (lookup, batch, write, health).
//! - [`decide`]: manifest freshness, segment choice and cache keys, what a segment says.
//! - [`answer`]: response bodies and the origin URL a lookup goes to.
//! - [`lru`]: the byte-bounded in-isolate segment cache.
//! - [`flight`]: one fetch at a time per missing manifest or segment, without sharing promises.
//! - [`config`]: the worker's settings (`ORIGIN_URL`, `EDGE_SECRET`, `FRESHNESS_SECS`,
//!   `MEMORY_CACHE_MB`), parsed once per request into [`config::EdgeConfig`].
//! - `glue` (wasm32 only): the `#[event]` entry points and all I/O.
//!
//! Only `glue` touches the Workers runtime, so `cargo test -p bloomgate-edge` runs natively.
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
