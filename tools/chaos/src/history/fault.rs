//! What was done to the system, or seen happen to it: the kinds of fault, and one fault's
//! window.

use super::Micros;
use serde::{Deserialize, Serialize};

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
    /// `FLUSHALL` right after a checkpoint round recorded the filter's checkpoint: the recovery
    /// starts from a checkpoint seconds old, and the writes since are all in the log.
    FlushAfterCheckpoint,
    /// `FLUSHALL` while a checkpoint round is saving the filter's segments: the round must be
    /// abandoned, and the recovery start from the checkpoint before it.
    FlushDuringCheckpoint,
    /// `FLUSHALL`, then `FLUSHALL` again once the recovery has named its generation, while it
    /// loads the checkpoint and replays the log: the next recovery starts over.
    FlushDuringReplay,
    /// `DEL` of the active generation's insert journal: no write can be acknowledged to it, and
    /// the recovery check rebuilds it (from a checkpoint).
    DelJournal,
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
    pub const INJECTED: [FaultKind; 22] = [
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
        FaultKind::FlushAfterCheckpoint,
        FaultKind::FlushDuringCheckpoint,
        FaultKind::FlushDuringReplay,
        FaultKind::DelJournal,
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
            FaultKind::FlushAfterCheckpoint => "flushall_after_checkpoint",
            FaultKind::FlushDuringCheckpoint => "flushall_during_checkpoint",
            FaultKind::FlushDuringReplay => "flushall_during_replay",
            FaultKind::DelJournal => "del_journal",
            FaultKind::ObservedCassandraStall => "observed_cassandra_stall",
            FaultKind::ObservedRedisStall => "observed_redis_stall",
        }
    }

    /// Whether the origins promise to end this fault on their own with a new generation:
    /// lost or stale bits (docs/design.md: "rebuilds on its own when Redis lost the bits", DESIGN.md
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
                | FaultKind::FlushAfterCheckpoint
                | FaultKind::FlushDuringCheckpoint
                | FaultKind::FlushDuringReplay
                | FaultKind::DelJournal
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
    /// Which fault.
    pub kind: FaultKind,
    /// When it was injected.
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
    /// For a Redis going back in time (a rollback, a master killed): whether an origin held a
    /// local copy of the filter when it was injected (None: not asked).
    #[serde(default)]
    pub copy_held: Option<bool>,
}
