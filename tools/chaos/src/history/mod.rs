//! What a chaos run records: every operation with its start and end on one monotonic clock
//! (microseconds since the run began), every fault with its window (injected, or observed by
//! the prober), and the end-of-run evidence (Cassandra reads, memory samples, log lines, the
//! edge found dead). The checker reads only this.
//!
//! # Layout
//! - [`op`]: one operation of the workload: its call, target, reason and outcome.
//! - [`fault`]: the kinds of fault, and one fault's window.
//! - [`recorder`]: collects the history from many tasks on one clock.
//! - this file: the end-of-run evidence and the history the checker reads.

mod fault;
mod op;
mod recorder;

pub use fault::{Fault, FaultKind};
pub use op::{Answer, AnsweredBy, Op, OpKind, Outcome, Target, Why};
pub use recorder::{unix_ms, Recorder};

use crate::keys::KeyId;
use serde::{Deserialize, Serialize};

/// Microseconds since the start of the run, on the chaos process's monotonic clock.
pub type Micros = u64;

/// A key read directly from Cassandra at the end of the run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DbCheck {
    /// The key.
    pub key: KeyId,
    /// Whether Cassandra holds it; `None` if it could not be read.
    pub present: Option<bool>,
}

/// A process whose memory is sampled.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Process {
    /// Origin number n.
    Origin(u8),
    /// The edge's `workerd` that runs the Worker.
    EdgeWorker,
    /// The `workerd` of wrangler's proxy in front of it (on the edge's port; it also runs
    /// wrangler's inspector proxy).
    EdgeProxy,
}

impl Process {
    /// Who answers for it.
    pub fn target(self) -> Target {
        match self {
            Process::Origin(i) => Target::Origin(i),
            Process::EdgeWorker | Process::EdgeProxy => Target::Edge,
        }
    }
}

impl std::fmt::Display for Process {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Process::Origin(i) => write!(f, "origin-{i}"),
            Process::EdgeWorker => f.write_str("edge workerd"),
            Process::EdgeProxy => f.write_str("edge proxy workerd"),
        }
    }
}

/// A process's resident memory at one moment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RssSample {
    /// The process sampled.
    pub process: Process,
    /// Its process then.
    pub pid: u32,
    /// When it was sampled.
    pub at: Micros,
    /// `VmRSS` in KiB.
    pub kib: u64,
}

/// A line of a process's log that shows a panic.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogLine {
    /// The log (`origin-0`, `wrangler`).
    pub source: String,
    /// The line.
    pub line: String,
}

/// The edge stopped answering: every connection refused for longer than the harness waits,
/// with no `edge_cut` active. From `at` on, nothing more was sent to it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EdgeDown {
    /// The first refused connection of the unbroken run of them.
    pub refused_since: Micros,
    /// When the harness stopped sending to the edge.
    pub at: Micros,
    /// Edge operations the workload would have sent after `at`.
    pub not_sent: u64,
    /// What the edge's log says about it (its last lines of a crash), if anything.
    pub note: String,
}

/// An operation the workload did not send: too many were in flight.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Skipped {
    /// When the operation was due.
    pub at: Micros,
    /// To the edge (else to an origin).
    pub edge: bool,
}

/// What one origin's `/metrics` and log said over the run, summed over its lives (a counter
/// that went down started again from zero: the process was restarted).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OriginCounters {
    /// Lookups its local copy answered (`local_copy_lookups_total{outcome="answered"}`).
    pub copy_answered: u64,
    /// Of those, "no"s from memory under the copy's read lease (`filter_reads_total{via="lease"}`).
    #[serde(default)]
    pub lease_answered: u64,
    /// Journal reads it answered 410 (an edge behind the journal's retention must reload).
    pub journal_gone: u64,
    /// Local copies it dropped because the journal no longer held their position (its log).
    pub copy_resets: u64,
    /// Filters it recovered from lost bits from a checkpoint and the log, not a scan
    /// (`recoveries_total{source="checkpoint"}`).
    #[serde(default)]
    pub recovered_from_checkpoint: u64,
    /// `/metrics` samples read.
    pub samples: u64,
}

/// Everything the checker reads.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct History {
    /// Workload operations, in the order they ended.
    pub ops: Vec<Op>,
    /// Faults, in the order they ended.
    pub faults: Vec<Fault>,
    /// The end-of-run reads of acknowledged keys.
    pub db_checks: Vec<DbCheck>,
    /// Memory samples of the origins and the edge.
    pub rss: Vec<RssSample>,
    /// Panic lines found in the logs.
    pub panics: Vec<LogLine>,
    /// The edge stopped answering, if it did.
    pub edge_down: Option<EdgeDown>,
    /// Operations not sent because too many were in flight.
    pub skipped: Vec<Skipped>,
    /// Per origin, what its metrics and log said.
    pub origin_counters: std::collections::BTreeMap<u8, OriginCounters>,
    /// Wall-clock time of the run's zero, ms since the Unix epoch (to find moments in the
    /// processes' logs).
    pub started_unix_ms: u64,
}
