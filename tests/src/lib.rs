//! Shared helpers for bloomgate's end-to-end tests.
#![forbid(unsafe_code)]
