//! bloomgate's HTTP API from Rust.
//!
//! ```no_run
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
//! [`api`] holds the request and response types; the origin serializes the same types, and
//! serves their OpenAPI description at `/openapi.json`.
#![forbid(unsafe_code)]

pub mod api;
mod client;

pub use client::{retry_after, Client, Error};
