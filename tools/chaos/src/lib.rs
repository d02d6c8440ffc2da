//! `bloomgate-chaos`: the history checker. Writers and readers run against several
//! origins (separate processes) and the edge on real Redis, Cassandra and `wrangler dev`,
//! every operation is recorded with its start and end on one clock, faults are injected on a
//! schedule, and the history is checked afterwards (DESIGN.md invariant 9: proofs are
//! histories, not sequences that wait out every cache).
//!
//! # Layout
//! - [`keys`]: the run's keys, as (class, number) ids spelled as 64 hex digits from a seed.
//! - [`history`]: operations (`op`), faults (`fault`) and end-of-run evidence, and the recorder
//!   (`recorder`).
//! - [`check`]: the checker: pure functions over a history, one rule each (`rules`), unit-tested;
//!   the excuse table (`excuses`) and the fault windows it is asked about (`windows`), the evidence
//!   a run must show (`floors`), availability beside safety (`availability`).
//! - [`workload`]: writers and readers at bounded rates: the paced streams (`streams`), what an
//!   answer means (`answers`), when to give up on the edge (`edge_watch`).
//! - [`schedule`]: which faults, in which order, as data.
//! - [`faults`]: the injectors and the tracks that run them: the sequential steps (`steps`), the
//!   `kill -9`s (`kills`), the edge left behind (`edge_behind`), what they read of the filter
//!   (`filter_state`).
//! - [`stalls`]: observed fault windows: stalls of Cassandra or Redis nobody injected.
//! - [`memory`]: RSS samples of the origins and the edge's `workerd`.
//! - [`origin_metrics`]: the origins' `/metrics`, read over the run (local copies, journal resets).
//! - [`cluster`]: Redis, its proxies, the origin processes, the edge.
//! - [`origin_process`]: one origin process: its configuration, start, `kill -9`, stop.
//! - [`cassandra`]: the shared Cassandra: paused and continued, read back, keyspace dropped.
//! - [`logs`]: what the processes' logs say: panics, the edge's death, automatic rebuilds.
//! - [`setup`]: the run's filter, created and settled before the workload starts.
//! - [`run`]: one run from start to report.
//! - [`cli`]: the command line (`bloomgate-chaos`, and `bloomgate-chaos-planted` for the negative controls).
//! - [`report`]: JSON and the Markdown summary (`markdown`), errors and times spelled (`text`).

#![forbid(unsafe_code)]

pub mod cassandra;
pub mod check;
pub mod cli;
pub mod cluster;
pub mod faults;
pub mod history;
pub mod keys;
pub mod logs;
pub mod memory;
pub mod origin_metrics;
pub mod origin_process;
pub mod report;
pub mod run;
pub mod schedule;
pub mod setup;
pub mod stalls;
pub mod workload;
