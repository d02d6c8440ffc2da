//! `bloomgate-loadgen`: measures what bloomgate saves, side by side, on one machine.
//!
//! # Layout
//! - [`workload`]: seeded present keys (hex SHA-256), miss streams that never repeat, Zipf hits.
//! - [`driver`]: N HTTP/1.1 connections, closed loop or fixed rate, HDR latency, errors.
//! - [`servers`]: origins (child process or own-runtime thread), the hello-world floor, and a
//!   proxy counting the edge's requests to the origin.
//! - [`probe`]: origin counters, Cassandra's coordinator read count, per-process CPU time.
//! - [`bench`]: one run over every target plus the miss-share × fp_rate sweep.
//! - [`report`]: results, issue 6's targets as checks, Markdown tables, JSON.
//! - [`chart`]: PNG charts.

pub mod bench;
pub mod chart;
pub mod driver;
pub mod probe;
pub mod report;
pub mod servers;
pub mod workload;
