#![cfg_attr(feature = "http", doc = include_str!("../README.md"))]
#![cfg_attr(
    not(feature = "http"),
    doc = "bloomgate's wire contract: the paths, headers, media types and bodies that the origin, \
           the edge and clients all compile. The client itself is the `http` feature (on by default)."
)]
//!
//! # Layout
//! - [`api`]: the bodies: what a request sends, what each answer holds, the problem body of
//!   every error. The origin serializes these very types and serves their OpenAPI description
//!   at `/openapi.json`; the edge writes its own "not seen" as a [`api::KeyAnswer`], and what an
//!   isolate holds and did as an [`api::IsolateReport`]. One file a resource: `filters`
//!   (create, list, rebuild, drop), `answers` (lookups and writes), `batch_keys` (a batch's
//!   body, read with a bound on its keys), `stats`, `problem` (the error body) and `isolate`.
//! - [`paths`]: every endpoint's route pattern (as the origin's router spells it) and the
//!   builders that fill one in; the matcher the edge routes with.
//! - [`headers`]: the `x-bloomgate-*` header names and how `Retry-After` is written.
//! - [`media`]: the content types.
//! - [`caching`]: the `Cache-Control` of lookup answers and of the edge's feed, with why.
//! - [`feed_token`]: the path token that keeps the shared feed private without a header.
//! - `Client`, `ClientBuilder`, `RetryPolicy` and `Error` (feature `http`, `client.rs` and
//!   `client/`): one method per API call, over reqwest with rustls.
//!
//! Without the `http` feature the crate needs neither reqwest nor tokio: the edge depends on
//! it with `default-features = false` and compiles it to wasm32.
#![forbid(unsafe_code)]

pub mod api;
pub mod caching;
pub mod feed_token;
pub mod headers;
pub mod media;
pub mod paths;

#[cfg(feature = "http")]
mod client;

#[cfg(feature = "http")]
pub use client::{
    Client, ClientBuilder, Error, Presence, RetryPolicy, DEFAULT_CONNECT_TIMEOUT, DEFAULT_MAX_BATCH,
    DEFAULT_POOL_IDLE_TIMEOUT, DEFAULT_TIMEOUT,
};
