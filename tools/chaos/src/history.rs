//! What a chaos run records: every operation with its start and end on one monotonic clock
//! (microseconds since the run began), every fault with its window (injected, or observed by
//! the prober), and the end-of-run evidence (Cassandra reads, memory samples, log lines, the
//! edge found dead). The checker reads only this.

use super::keys::KeyId;
use serde::{Deserialize, Serialize};
use std::sync::Mutex;
use std::time::Instant;

/// Microseconds since the start of the run, on the chaos process's monotonic clock.
pub type Micros = u64;

/// Who an operation was sent to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Target {
    /// Origin number n (its own process and port).
    Origin(u8),
    /// The edge (`wrangler dev`).
    Edge,
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Target::Origin(i) => write!(f, "origin-{i}"),
            Target::Edge => f.write_str("edge"),
        }
    }
}

/// The API call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OpKind {
    /// `PUT /v1/filters/{f}/keys/{key}`: 201 = acknowledged.
    Write,
    /// `POST /v1/filters/{f}/keys`: 200 = all acknowledged.
    WriteBatch,
    /// `GET /v1/filters/{f}/keys/{key}`.
    Lookup,
    /// `POST /v1/filters/{f}/lookups`.
    LookupBatch,
    /// `DELETE /v1/filters/{f}/keys/{key}`.
    Delete,
}

impl OpKind {
    /// Short name.
    pub fn name(self) -> &'static str {
        match self {
            OpKind::Write => "write",
            OpKind::WriteBatch => "write_batch",
            OpKind::Lookup => "lookup",
            OpKind::LookupBatch => "lookup_batch",
            OpKind::Delete => "delete",
        }
    }

    /// Whether the call stores keys.
    pub fn is_write(self) -> bool {
        matches!(self, OpKind::Write | OpKind::WriteBatch)
    }

    /// Whether the call asks about keys.
    pub fn is_lookup(self) -> bool {
        matches!(self, OpKind::Lookup | OpKind::LookupBatch)
    }
}

/// Why the workload sent an operation (for the report; the checker treats all alike).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Why {
    /// Keys written at the start, past the filter's small capacity (the automatic resize).
    Preload,
    /// The steady stream of writes.
    Write,
    /// A read through another origin right after a write was acknowledged (the race of a
    /// write via B and an immediate read via A).
    ReadAfterWrite,
    /// A read through the edge of a key acknowledged S seconds (plus a little) before.
    EdgeAfterFreshness,
    /// A random earlier-acknowledged or never-written key.
    Random,
    /// Extra random reads of a lookup burst.
    Burst,
    /// Keys written only to be deleted, and their deletes.
    Delete,
}

impl Why {
    /// Short name.
    pub fn name(self) -> &'static str {
        match self {
            Why::Preload => "preload",
            Why::Write => "write",
            Why::ReadAfterWrite => "read_after_write",
            Why::EdgeAfterFreshness => "edge_after_freshness",
            Why::Random => "random",
            Why::Burst => "burst",
            Why::Delete => "delete",
        }
    }
}

/// Who answered a lookup (`x-bloomgate-answered-by`, or `answered_by` in a batch).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AnsweredBy {
    /// The origin's filter ("certainly not").
    Filter,
    /// Cassandra, through an origin.
    Database,
    /// The edge's own segments.
    Edge,
    /// Not said.
    Unknown,
}

impl AnsweredBy {
    /// Short name.
    pub fn name(self) -> &'static str {
        match self {
            AnsweredBy::Filter => "filter",
            AnsweredBy::Database => "database",
            AnsweredBy::Edge => "edge",
            AnsweredBy::Unknown => "unknown",
        }
    }

    /// From the header or JSON label.
    pub fn parse(label: Option<&str>) -> AnsweredBy {
        match label {
            Some("filter") => AnsweredBy::Filter,
            Some("database") => AnsweredBy::Database,
            Some("edge") => AnsweredBy::Edge,
            _ => AnsweredBy::Unknown,
        }
    }
}

/// One key's answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Answer {
    /// `"seen"`.
    pub seen: bool,
    /// Who answered.
    pub by: AnsweredBy,
}

/// How an operation ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// A write or delete succeeded (201 single write, 200 batch write or delete).
    Acked,
    /// A lookup answered, one answer per key in request order (200 `seen:true` or 404
    /// `seen:false` for a single key; 200 with results for a batch).
    Answers(Vec<Answer>),
    /// Any other HTTP answer.
    Status {
        /// HTTP status.
        code: u16,
        /// Whether it carried `Retry-After`.
        retry_after: bool,
        /// The start of the body, for the report.
        detail: String,
    },
    /// No HTTP answer at all (connection refused or reset, client timeout).
    Transport {
        /// The client's error.
        error: String,
    },
}

/// One operation of the workload.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Op {
    /// The call.
    pub kind: OpKind,
    /// Why it was sent.
    pub why: Why,
    /// Where it was sent.
    pub target: Target,
    /// Just before the request was sent.
    pub start: Micros,
    /// Just after the whole answer arrived.
    pub end: Micros,
    /// The keys, in request order.
    pub keys: Vec<KeyId>,
    /// How it ended.
    pub outcome: Outcome,
}

/// What was done to the system.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FaultKind {
    /// Keys written past the small starting capacity until the origins resized on their own.
    AutoResize,
    /// `POST /v1/filters/{f}/rebuild` on one origin while the others write and read.
    Rebuild,
    /// The same with a new `{"capacity": N}`.
    Resize,
    /// `kill -9` of the origin running a rebuild while it settles, then a restart.
    KillBuilderSettling,
    /// ... while it scans Cassandra.
    KillBuilderScanning,
    /// ... while it uploads segments to Redis.
    KillBuilderUploading,
    /// `kill -9` of Redis, restarted empty.
    RedisRestartEmpty,
    /// `SAVE` at T1, writes go on, `kill -9`, restart from that snapshot: Redis went back
    /// in time (recent bits lost, keys kept).
    RedisRollback,
    /// `DEL` of one segment's `:bits` key.
    DelSegmentBits,
    /// `DEL` of one segment's `:ver` key.
    DelSegmentVer,
    /// `DEL` of the filter's meta key.
    DelMeta,
    /// `FLUSHALL`.
    FlushAll,
    /// A burst of deletes past the stale-delete share: the origins rebuild on their own.
    StaleDeletes,
    /// SIGSTOP of Cassandra for a few seconds, then SIGCONT.
    CassandraPause,
    /// The edge's connection to its origin cut (a proxy drops everything).
    EdgeCut,
    /// Ten times the lookup rate for a few seconds.
    LookupBurst,
    /// Every Redis connection delayed beyond the origins' Redis timeout.
    SlowRedis,
    /// Redis Cluster: `kill -9` of a master while writes go on; its replica is promoted
    /// (asynchronous replication: it may lack the master's last bits), then the killed node
    /// is restarted and rejoins as a replica.
    RedisMasterKill,
    /// Not injected: the prober's direct query to Cassandra was slower than the threshold
    /// (Cassandra, or the whole machine, stalled on its own).
    ObservedCassandraStall,
    /// Not injected: the prober's direct `PING` to Redis (bypassing the fault proxies) was
    /// slower than the threshold.
    ObservedRedisStall,
}

impl FaultKind {
    /// Every injected kind, in the order of the report's fault table.
    pub const INJECTED: [FaultKind; 18] = [
        FaultKind::AutoResize,
        FaultKind::Rebuild,
        FaultKind::Resize,
        FaultKind::KillBuilderSettling,
        FaultKind::KillBuilderScanning,
        FaultKind::KillBuilderUploading,
        FaultKind::RedisRestartEmpty,
        FaultKind::RedisRollback,
        FaultKind::DelSegmentBits,
        FaultKind::DelSegmentVer,
        FaultKind::DelMeta,
        FaultKind::FlushAll,
        FaultKind::StaleDeletes,
        FaultKind::CassandraPause,
        FaultKind::EdgeCut,
        FaultKind::LookupBurst,
        FaultKind::SlowRedis,
        FaultKind::RedisMasterKill,
    ];

    /// The kinds the prober records (listed apart in the report; never required).
    pub const OBSERVED: [FaultKind; 2] = [FaultKind::ObservedCassandraStall, FaultKind::ObservedRedisStall];

    /// Short name (JSON and tables).
    pub fn name(self) -> &'static str {
        match self {
            FaultKind::AutoResize => "auto_resize",
            FaultKind::Rebuild => "rebuild",
            FaultKind::Resize => "resize",
            FaultKind::KillBuilderSettling => "kill_builder_settling",
            FaultKind::KillBuilderScanning => "kill_builder_scanning",
            FaultKind::KillBuilderUploading => "kill_builder_uploading",
            FaultKind::RedisRestartEmpty => "redis_restart_empty",
            FaultKind::RedisRollback => "redis_rollback",
            FaultKind::DelSegmentBits => "del_segment_bits",
            FaultKind::DelSegmentVer => "del_segment_ver",
            FaultKind::DelMeta => "del_meta",
            FaultKind::FlushAll => "flushall",
            FaultKind::StaleDeletes => "stale_deletes",
            FaultKind::CassandraPause => "cassandra_pause",
            FaultKind::EdgeCut => "edge_cut",
            FaultKind::LookupBurst => "lookup_burst",
            FaultKind::SlowRedis => "slow_redis",
            FaultKind::RedisMasterKill => "redis_master_kill",
            FaultKind::ObservedCassandraStall => "observed_cassandra_stall",
            FaultKind::ObservedRedisStall => "observed_redis_stall",
        }
    }

    /// Whether the origins promise to end this fault on their own with a new generation:
    /// lost or stale bits (README: "rebuilds on its own when Redis lost the bits", DESIGN.md
    /// invariant 8), a filter past its capacity, and many deleted keys still set. A requested rebuild is not among them: one
    /// that fails (a Cassandra pause during its scan) is the operator's to repeat.
    pub fn repaired_automatically(self) -> bool {
        matches!(
            self,
            FaultKind::AutoResize
                | FaultKind::RedisRestartEmpty
                | FaultKind::RedisRollback
                | FaultKind::RedisMasterKill
                | FaultKind::DelSegmentBits
                | FaultKind::DelSegmentVer
                | FaultKind::DelMeta
                | FaultKind::FlushAll
                | FaultKind::StaleDeletes
        )
    }

    /// Whether the window was observed by the prober rather than injected by the harness.
    pub fn is_observed(self) -> bool {
        FaultKind::OBSERVED.contains(&self)
    }

    /// Whether the fault needs the edge.
    pub fn needs_edge(self) -> bool {
        self == FaultKind::EdgeCut
    }
}

/// One fault. `start..end` is when the system was disturbed: from the injection to the end of
/// the disturbance (the process back, the proxy healed, or the filter rebuilt); for an
/// observed stall, from the start of the first slow probe to the end of the next fast one.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Fault {
    /// What.
    pub kind: FaultKind,
    /// Injected.
    pub start: Micros,
    /// Over (see above).
    pub end: Micros,
    /// The origin killed, or the origin that ran the rebuild.
    pub origin: Option<u8>,
    /// For faults the origins must repair: whether a new filter generation was active
    /// before the wait ran out.
    pub recovered: Option<bool>,
    /// What happened, for the report.
    pub note: String,
}

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
    /// Whose.
    pub process: Process,
    /// Its process then.
    pub pid: u32,
    /// When.
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
    /// Wall-clock time of the run's zero, ms since the Unix epoch (to find moments in the
    /// processes' logs).
    pub started_unix_ms: u64,
}

/// Collects a history, and the harness's notes, from many tasks at once.
pub struct Recorder {
    clock: Instant,
    history: Mutex<History>,
    notes: Mutex<Vec<String>>,
}

/// Milliseconds since the Unix epoch by this machine's clock (the origins' clock too).
pub fn unix_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

impl Default for Recorder {
    fn default() -> Self {
        Recorder::new()
    }
}

impl Recorder {
    /// Starts the clock.
    pub fn new() -> Recorder {
        let started_unix_ms = unix_ms();
        Recorder {
            clock: Instant::now(),
            history: Mutex::new(History { started_unix_ms, ..History::default() }),
            notes: Mutex::new(Vec::new()),
        }
    }

    /// Now, on the run's clock.
    pub fn now(&self) -> Micros {
        self.clock.elapsed().as_micros() as Micros
    }

    fn with<T>(&self, f: impl FnOnce(&mut History) -> T) -> T {
        f(&mut self.history.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Records a finished operation.
    pub fn op(&self, op: Op) {
        self.with(|h| h.ops.push(op));
    }

    /// Records a fault whose window is over.
    pub fn fault(&self, fault: Fault) {
        self.with(|h| h.faults.push(fault));
    }

    /// Records a memory sample.
    pub fn rss(&self, sample: RssSample) {
        self.with(|h| h.rss.push(sample));
    }

    /// Records the end-of-run Cassandra reads.
    pub fn db_checks(&self, checks: Vec<DbCheck>) {
        self.with(|h| h.db_checks.extend(checks));
    }

    /// Records that the edge stopped answering (once; later calls are ignored).
    pub fn edge_down(&self, down: EdgeDown) {
        self.with(|h| {
            h.edge_down.get_or_insert(down);
        });
    }

    /// Notes something the harness noticed (missed phases, failed steps, the edge given up
    /// on), stamped with the run's time, and says it on stderr.
    pub fn note(&self, text: String) {
        let at = self.now() as f64 / 1e6;
        eprintln!("chaos: {at:>7.1}s {text}");
        self.notes.lock().unwrap_or_else(|e| e.into_inner()).push(format!("{at:.1}s {text}"));
    }

    /// The notes so far.
    pub fn notes(&self) -> Vec<String> {
        self.notes.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Records panic lines.
    pub fn panics(&self, lines: Vec<LogLine>) {
        self.with(|h| h.panics.extend(lines));
    }

    /// Faults so far (for the schedule's bookkeeping).
    pub fn faults(&self) -> Vec<Fault> {
        self.with(|h| h.faults.clone())
    }

    /// Operations so far.
    pub fn op_count(&self) -> usize {
        self.with(|h| h.ops.len())
    }

    /// The history, taken out of the recorder at the end of the run.
    pub fn take(&self) -> History {
        self.with(std::mem::take)
    }
}
