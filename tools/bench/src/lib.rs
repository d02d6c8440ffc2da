//! `bloomgate-bench`: measures what bloomgate saves, side by side, on one machine: the load
//! generator (`bloomgate-loadgen`) and the A/B binaries built on it (`negative-path`,
//! `shard-throughput`), plus `rebuild-throughput`, `edge-memory` and `origin-burst`.
//!
//! # Layout
//! - [`workload`]: seeded present keys (hex SHA-256), miss streams that never repeat, Zipf hits.
//! - [`driver`]: N HTTP/1.1 connections, closed loop or fixed rate, HDR latency, errors.
//! - [`pacer`]: a fixed rate's request tickets, released with sub-millisecond precision.
//! - [`writes`]: fixed-rate writes of fresh keys, and the probe following them to "seen".
//! - [`servers`]: origins (child process or own-runtime thread) and the hello-world floor.
//! - [`counting_proxy`]: a proxy counting the edge's requests to the origin and the bytes back.
//! - [`counters`]: the origin's samples (and the fp rate they show), Cassandra's coordinator
//!   reads, Redis's command counts.
//! - [`cpu`]: CPU time per process, per group and of the whole machine; waiting for quiet.
//! - [`filters`]: filters created and preloaded for a run, and their stats.
//! - [`config`]: what a run is asked to do: targets, sweep and writes A/B settings.
//! - [`run`]: one run as configured: the side-by-side targets, the sweep, the writes A/B.
//! - [`side_by_side`]: floor, baseline, filtered origin and edge, measured alike, and checks.
//! - [`sweep`]: Cassandra reads per lookup over miss share × fp_rate, against theory.
//! - [`writes_ab`]: edge freshness and bytes per write, the insert journal on and off: one side
//!   in one round (`side`), what the isolate said of itself (`isolate`), the figures and checks
//!   (`results`).
//! - [`ab`]: servers measured in alternating rounds, CPU per lookup, medians (A/B binaries).
//! - [`lease_costs`]: what read leases cost besides lookups: write latency, Redis calls at rest.
//! - [`report`]: results, the targets as checks, Markdown tables, JSON.
//! - [`check`]: a promise held to what was measured; [`stats`]: the median, rates and latency quantiles the reports share.
//! - [`chart`]: PNG charts of a run; [`chart_writes`]: the writes A/B's, from a results.json.
//! - [`churn`]: the edge under lookups, writes and new generations, its memory sampled
//!   (`edge-memory`): the checked traffic (`traffic`), the memory chart (`chart`).
//! - [`burst`]: an origin in a memory-limited cgroup under a burst of batch writes, and the
//!   autoscaling signal it gives, as a promtool rule test (`origin-burst`): the cgroup
//!   (`cgroup`), the load (`load`), the signal (`series`), the report and its checks (`summary`).

#![forbid(unsafe_code)]

pub mod ab;
pub mod burst;
pub mod chart;
pub mod chart_writes;
pub mod check;
pub mod churn;
pub mod config;
pub mod counters;
pub mod counting_proxy;
pub mod cpu;
pub mod driver;
pub mod filters;
pub mod lease_costs;
pub mod pacer;
pub mod report;
pub mod run;
pub mod servers;
pub mod side_by_side;
pub mod stats;
pub mod sweep;
pub mod workload;
pub mod writes;
pub mod writes_ab;
