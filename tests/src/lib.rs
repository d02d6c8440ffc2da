//! Shared helpers for bloomgate's end-to-end tests.
