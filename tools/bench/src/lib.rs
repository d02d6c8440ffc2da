//! `bloomgate-bench`: measures what bloomgate saves, side by side, on one machine: the load
//! generator (`bloomgate-loadgen`) and the A/B binaries built on it (`negative-path`,
//! `shard-throughput`), plus `rebuild-throughput` and `edge-memory`.
//!
//! # Layout
//! - [`workload`]: seeded present keys (hex SHA-256), miss streams that never repeat, Zipf hits.
//! - [`driver`]: N HTTP/1.1 connections, closed loop or fixed rate, HDR latency, errors.
//! - [`pacer`]: a fixed rate's request tickets, released with sub-millisecond precision.
//! - [`servers`]: origins (child process or own-runtime thread) and the hello-world floor.
//! - [`proxy`]: a proxy counting the edge's requests to the origin and the bytes back, by kind.
//! - [`writes`]: fixed-rate writes of fresh keys, and the probe following them to "seen".
//! - [`probe`]: origin counters, Cassandra's coordinator read count, per-process CPU time.
//! - [`ab`]: servers measured in alternating rounds, CPU per lookup, medians (A/B binaries).
//! - [`bench`]: one run over every target plus the miss-share × fp_rate sweep.
//! - [`freshness`]: issue 10's A/B, edge freshness and bytes per write, journal on and off.
//! - [`report`]: results, issue 6's targets as checks, Markdown tables, JSON.
//! - [`chart`]: PNG charts; [`chart_writes`]: the writes A/B's, from a results.json.

#![forbid(unsafe_code)]

pub mod ab;
pub mod bench;
pub mod chart;
pub mod chart_writes;
pub mod driver;
pub mod freshness;
pub mod pacer;
pub mod probe;
pub mod proxy;
pub mod report;
pub mod servers;
pub mod workload;
pub mod writes;
