//! bloomgate edge: a Cloudflare Worker (Rust compiled to wasm) in front of the origin.
//!
//! For now it is the minimal worker that proves the toolchain end to end: `GET /healthz`
//! answers locally, `GET /v1/filters/:filter/keys/:key` is relayed to the origin with a
//! subrequest, anything else is a 404 problem. The filter logic arrives later.
//!
//! # Layout
//! - [`config`]: the worker's settings (`ORIGIN_URL`, `EDGE_SECRET`, `FRESHNESS_SECS`),
//!   parsed once per request into [`config::EdgeConfig`].
//! - [`answer`]: pure decisions — response bodies and the origin URL a lookup goes to.
//! - `glue` (wasm32 only): the `#[event]` entry points, router and I/O.
//!
//! Only `glue` touches the Workers runtime, so `cargo test -p bloomgate-edge` runs natively.
//! Build the worker with `scripts/edge-build`; see `edge/README.md`.
#![forbid(unsafe_code)]

pub mod answer;
pub mod config;
pub mod decide;
pub mod lru;
pub mod route;

#[cfg(target_arch = "wasm32")]
mod glue;
