//! bloomgate's HTTP API from Rust: the wire contract that the origin, the edge and clients all
//! compile, and (feature `http`, on by default) a client.
//!
//! ```no_run
//! # #[cfg(feature = "http")]
//! # async fn demo() -> Result<(), bloomgate_client::Error> {
//! use bloomgate_client::{api::CreateFilter, Client};
//! let client = Client::new("http://127.0.0.1:8080").with_token("a-writer-token-of-16+-chars");
//! client.create_filter("users", &CreateFilter::new(1_000_000, 0.01)).await?;
//! client.insert("users", &"ab".repeat(32), b"").await?;
//! let answer = client.lookup("users", &"cd".repeat(32)).await?;
//! assert!(!answer.seen);
//! # Ok(()) }
//! ```
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
//! - `Client` and `Error` (feature `http`, `client.rs`): one method per API call.
//!
//! Without the `http` feature the crate needs neither reqwest nor tokio: the edge depends on
//! it with `default-features = false` and compiles it to wasm32.
#![forbid(unsafe_code)]

pub mod api;
pub mod caching;
pub mod headers;
pub mod media;
pub mod paths;

#[cfg(feature = "http")]
mod client;

#[cfg(feature = "http")]
pub use client::{retry_after, Client, Error, Presence};
