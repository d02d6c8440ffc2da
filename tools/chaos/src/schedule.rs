//! The fault schedule, as data: a sequential track of steps that disturb the filter and wait
//! for it to be repaired (one after another, so each repair is observed), and a background
//! track of timed faults that overlap whatever the sequential track is doing. Both repeat
//! until the run's duration is over; the first round of each always completes, so every fault
//! fires at least once.

use crate::history::FaultKind;
use crate::workload::WorkloadSettings;
use std::collections::BTreeSet;
use std::time::Duration;

/// Phases of a rebuild, as `GET /v1/filters/{f}/stats` shows them in `rebuild.phase`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Phase {
    /// New generation named, waiting out writes in flight.
    Settling,
    /// Reading Cassandra.
    Scanning,
    /// Merging segments into Redis.
    Uploading,
}

impl Phase {
    /// Every phase, in the order a rebuild goes through them.
    pub const ALL: [Phase; 3] = [Phase::Settling, Phase::Scanning, Phase::Uploading];

    /// The phase named `name` (as in the stats and the published progress).
    pub fn named(name: &str) -> Option<Phase> {
        Phase::ALL.into_iter().find(|p| p.name() == name)
    }

    /// As in the stats.
    pub fn name(self) -> &'static str {
        match self {
            Phase::Settling => "settling",
            Phase::Scanning => "scanning",
            Phase::Uploading => "uploading",
        }
    }

    /// The fault of killing the builder in this phase.
    pub fn kill_fault(self) -> FaultKind {
        match self {
            Phase::Settling => FaultKind::KillBuilderSettling,
            Phase::Scanning => FaultKind::KillBuilderScanning,
            Phase::Uploading => FaultKind::KillBuilderUploading,
        }
    }
}

/// A step of the sequential track.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Step {
    /// Write past the small starting capacity; wait for the automatic resize.
    AutoResize,
    /// Manual rebuild on a random origin; wait for its switch.
    Rebuild,
    /// Manual rebuild with a new capacity; wait for its switch.
    Resize,
    /// Start a rebuild on a random origin and `kill -9` it in the phase; restart it.
    KillBuilder(Phase),
    /// `kill -9` Redis, restart it empty; wait for the automatic rebuild.
    RedisRestartEmpty,
    /// `DEL` one segment's `:bits`; wait for the automatic rebuild.
    DelSegmentBits,
    /// `DEL` one segment's `:ver`; wait for the automatic rebuild.
    DelSegmentVer,
    /// `DEL` the meta key; wait for the automatic rebuild.
    DelMeta,
    /// `FLUSHALL`; wait for the automatic rebuild.
    FlushAll,
    /// Delete many keys at once; wait for the automatic (stale-delete) rebuild.
    StaleDeletes,
    /// `SAVE` now (the rollback's point in time).
    Snapshot,
    /// `kill -9` Redis and restart it from the last snapshot; wait for a rebuild.
    Rollback,
    /// Redis Cluster: `kill -9` a master, wait for its replica's promotion and a rebuild,
    /// restart the node.
    RedisMasterKill,
    /// Cut the edge off its origin while no rebuild runs, until the insert journal no longer
    /// holds what it held when the cut began: the edge's copies must reload.
    EdgeBehindJournal,
    /// `FLUSHALL` right after a checkpoint round; wait for the recovery.
    FlushAfterCheckpoint,
    /// `FLUSHALL` while a checkpoint round saves segments; wait for the recovery.
    FlushDuringCheckpoint,
    /// `FLUSHALL`, and again while the recovery fills its generation; wait for the next.
    FlushDuringReplay,
    /// `DEL` the active generation's journal; wait for the automatic rebuild.
    DelJournal,
    /// Let the workload run undisturbed.
    Pause(Duration),
}

impl Step {
    /// The fault the step records, if any.
    pub fn fault(self) -> Option<FaultKind> {
        Some(match self {
            Step::AutoResize => FaultKind::AutoResize,
            Step::Rebuild => FaultKind::Rebuild,
            Step::Resize => FaultKind::Resize,
            Step::KillBuilder(phase) => phase.kill_fault(),
            Step::RedisRestartEmpty => FaultKind::RedisRestartEmpty,
            Step::DelSegmentBits => FaultKind::DelSegmentBits,
            Step::DelSegmentVer => FaultKind::DelSegmentVer,
            Step::DelMeta => FaultKind::DelMeta,
            Step::FlushAll => FaultKind::FlushAll,
            Step::StaleDeletes => FaultKind::StaleDeletes,
            Step::Rollback => FaultKind::RedisRollback,
            Step::RedisMasterKill => FaultKind::RedisMasterKill,
            Step::EdgeBehindJournal => FaultKind::EdgeCut,
            Step::FlushAfterCheckpoint => FaultKind::FlushAfterCheckpoint,
            Step::FlushDuringCheckpoint => FaultKind::FlushDuringCheckpoint,
            Step::FlushDuringReplay => FaultKind::FlushDuringReplay,
            Step::DelJournal => FaultKind::DelJournal,
            Step::Snapshot | Step::Pause(_) => return None,
        })
    }
}

/// Which Redis the origins share: the run's private one (behind a fault proxy per origin), or
/// a Redis Cluster of masters with replicas (no proxies: the cluster client learns the nodes'
/// own addresses).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RedisKind {
    /// One `redis-server` of the run's own.
    Private,
    /// A Redis Cluster started by `scripts/services start --topology cluster redis`.
    Cluster,
}

impl RedisKind {
    /// A cluster if its nodes are named, else the private Redis.
    pub fn of(cluster_nodes: &[String]) -> RedisKind {
        match cluster_nodes.is_empty() {
            true => RedisKind::Private,
            false => RedisKind::Cluster,
        }
    }
}

/// One round of the sequential track. A builder killed mid-rebuild leaves its lease in Redis
/// for 30 s (nobody can rebuild meanwhile), so each kill is followed by a fault that loses
/// Redis's state, lease included; the kill while uploading happens after the snapshot, so
/// the rollback also takes Redis back to before that rebuild. The automatic resize runs in
/// the first round only (it needs the small starting capacity). With the edge, the round also
/// cuts the edge off while the generation stays the same (nearly every other step makes a new
/// one), after a pause in which it loads that generation's segments.
///
/// On a cluster, the faults of the one process (restart, snapshot and rollback, the upload
/// slowed through its proxy) give way to the cluster's own: a master killed while writes go
/// on, its replica promoted.
pub fn sequential_round(first: bool, redis: RedisKind, edge: bool) -> Vec<Step> {
    let auto_resize = if first { vec![Step::AutoResize] } else { vec![] };
    let builder_killed_settling = match redis {
        RedisKind::Private => vec![Step::KillBuilder(Phase::Settling), Step::RedisRestartEmpty],
        RedisKind::Cluster => vec![Step::RedisMasterKill, Step::KillBuilder(Phase::Settling), Step::FlushAll],
    };
    let segments_lost =
        vec![Step::DelSegmentBits, Step::KillBuilder(Phase::Scanning), Step::FlushAll, Step::DelSegmentVer];
    // Recovery from checkpoints (the origins checkpoint every 2 s): the losses timed against the
    // checkpoint rounds and the recovery itself.
    let checkpoints_struck =
        vec![Step::FlushAfterCheckpoint, Step::FlushDuringCheckpoint, Step::FlushDuringReplay, Step::DelJournal];
    let edge_behind = if edge { vec![Step::Pause(Duration::from_secs(3)), Step::EdgeBehindJournal] } else { vec![] };
    let redis_back_in_time = match redis {
        RedisKind::Private => vec![
            Step::Snapshot,
            Step::Pause(Duration::from_secs(3)),
            Step::KillBuilder(Phase::Uploading),
            Step::Rollback,
        ],
        RedisKind::Cluster => vec![Step::RedisMasterKill],
    };
    let closing = vec![Step::DelMeta, Step::StaleDeletes, Step::Pause(Duration::from_secs(2))];
    [
        auto_resize,
        vec![Step::Rebuild, Step::Resize],
        builder_killed_settling,
        segments_lost,
        checkpoints_struck,
        edge_behind,
        redis_back_in_time,
        closing,
    ]
    .concat()
}

/// Which faults a run injects: the whole schedule, or one focused on a single failure, the
/// shortest that must catch a planted bug (the negative controls, tests/negative_controls.rs).
/// Each focused one is a part of the whole, which CI runs without planted bugs: a focused run
/// that fails, fails because of its bug.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Schedule {
    /// Every fault, in rounds (see [`sequential_round`] and [`background`]).
    Full,
    /// No fault: writes read back at once through the other origin, and at the edge S later.
    Quiet,
    /// A snapshot, writes, Redis restarted from that snapshot (the private Redis only).
    Rollback,
    /// The edge cut off from its origin while writes go on (with the edge only).
    EdgeCut,
}

impl Schedule {
    /// One round of the sequential track.
    pub fn round(self, first: bool, redis: RedisKind, edge: bool) -> Vec<Step> {
        let secs = Duration::from_secs;
        match self {
            Schedule::Full => sequential_round(first, redis, edge),
            Schedule::Quiet => vec![Step::Pause(secs(1))],
            Schedule::Rollback => {
                vec![Step::Pause(secs(3)), Step::Snapshot, Step::Pause(secs(4)), Step::Rollback, Step::Pause(secs(1))]
            }
            Schedule::EdgeCut => vec![Step::Pause(secs(5)), Step::EdgeBehindJournal, Step::Pause(secs(1))],
        }
    }

    /// The background track's faults.
    pub fn background(self, edge: bool, redis: RedisKind) -> Vec<Timed> {
        match self {
            Schedule::Full => background(edge, redis),
            Schedule::Quiet | Schedule::Rollback | Schedule::EdgeCut => Vec::new(),
        }
    }

    /// Every fault a run must inject at least once.
    pub fn required_faults(self, edge: bool, redis: RedisKind) -> BTreeSet<FaultKind> {
        let mut all: BTreeSet<FaultKind> = self.round(true, redis, edge).into_iter().filter_map(Step::fault).collect();
        all.extend(self.background(edge, redis).into_iter().map(|t| t.fault));
        all
    }

    /// Why it cannot run with this Redis and edge, if it cannot.
    pub fn unfit(self, redis: RedisKind, edge: bool) -> Option<&'static str> {
        match self {
            Schedule::Rollback if redis == RedisKind::Cluster => Some("the rollback schedule needs the private Redis"),
            Schedule::EdgeCut if !edge => Some("the edge-cut schedule needs the edge"),
            _ => None,
        }
    }
}

/// A background fault: at `offset` into each cycle, for `length`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Timed {
    /// From the start of the cycle.
    pub offset: Duration,
    /// Which fault.
    pub fault: FaultKind,
    /// How long the disturbance lasts.
    pub length: Duration,
}

/// How long one cycle of the background track is.
pub const BACKGROUND_CYCLE: Duration = Duration::from_secs(100);

/// The longest the edge is cut off to fall behind the journal.
pub const EDGE_CUT_MAX: Duration = Duration::from_secs(25);

/// The background track: spread over a cycle, each short. (Slow Redis needs the private
/// Redis's proxies.)
pub fn background(edge: bool, redis: RedisKind) -> Vec<Timed> {
    let at = |s, fault, len| Timed { offset: Duration::from_secs(s), fault, length: Duration::from_secs(len) };
    let mut track = vec![at(35, FaultKind::CassandraPause, 4)];
    if redis == RedisKind::Private {
        track.push(at(55, FaultKind::SlowRedis, 5));
    }
    track.push(at(75, FaultKind::LookupBurst, 4));
    if edge {
        track.insert(0, at(15, FaultKind::EdgeCut, 6));
    }
    track
}

/// Every fault the whole schedule must inject at least once.
pub fn required_faults(edge: bool, redis: RedisKind) -> BTreeSet<FaultKind> {
    Schedule::Full.required_faults(edge, redis)
}

/// Seconds of appends the run's journals keep at least (see [`journal_max_entries`]): above
/// the edge's refresh interval (S/2) and the local copies' idle catch-up (1 s), so neither
/// falls behind the retention unless cut off. (Redis trims a stream a node of up to 100
/// entries at a time, so a journal keeps up to that many more.)
pub const JOURNAL_SECONDS: f64 = 3.0;

/// Insert-journal entries the workload appends per second: one per add call (single writes,
/// batch writes, the deletable keys written once a second, those written one by one to be
/// deleted right after, the deleted keys written again).
pub fn journal_rate(w: &WorkloadSettings) -> f64 {
    let right_after = w.delete_rate * w.delete_after_write_share.clamp(0.0, 1.0);
    let batches = if w.delete_rate > right_after { 1.0 } else { 0.0 };
    let deletes = if w.delete_rate > 0.0 { batches + right_after + w.delete_rate * w.readd_share } else { 0.0 };
    w.write_rate + w.batch_rate + deletes
}

/// The run's `journal_max_entries`: [`JOURNAL_SECONDS`] of appends at the configured rates (at
/// least 20), small enough for an edge cut off for a while to fall behind it and reload.
pub fn journal_max_entries(w: &WorkloadSettings) -> u64 {
    (journal_rate(w) * JOURNAL_SECONDS).ceil().max(20.0) as u64
}

/// Rates for a run: the CI defaults, or the given ones.
pub fn describe(settings: &WorkloadSettings) -> String {
    format!(
        "{}/s writes (+ as many reads via another origin and at the edge), {}/s origin reads, {}/s edge reads, {}/s batches of {} writes and of {} lookups, {}/s deletes ({} of them right after their write, {} written again)",
        settings.write_rate,
        settings.read_rate,
        settings.edge_read_rate,
        settings.batch_rate,
        settings.batch_write_keys,
        settings.batch_lookup_keys,
        settings.delete_rate,
        settings.delete_after_write_share,
        settings.readd_share
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phases_are_read_back_by_name_and_ordered_as_a_rebuild_goes() {
        for phase in Phase::ALL {
            assert_eq!(Phase::named(phase.name()), Some(phase));
        }
        assert_eq!(Phase::named("done"), None);
        assert!(Phase::Settling < Phase::Scanning && Phase::Scanning < Phase::Uploading);
    }

    #[test]
    fn the_rounds_of_both_redis_kinds_together_inject_every_fault() {
        let mut required = required_faults(true, RedisKind::Private);
        required.extend(required_faults(true, RedisKind::Cluster));
        assert_eq!(
            required.len(),
            FaultKind::INJECTED.len(),
            "missing: {:?}",
            FaultKind::INJECTED.iter().filter(|f| !required.contains(f)).collect::<Vec<_>>()
        );
        assert!(!required_faults(false, RedisKind::Private).contains(&FaultKind::EdgeCut));
        assert!(required_faults(false, RedisKind::Cluster).contains(&FaultKind::RedisMasterKill));
        assert!(!required_faults(true, RedisKind::Cluster).contains(&FaultKind::SlowRedis), "needs the proxies");
    }

    #[test]
    fn each_focused_schedule_is_a_part_of_the_whole() {
        for (schedule, redis) in [
            (Schedule::Quiet, RedisKind::Cluster),
            (Schedule::Rollback, RedisKind::Private),
            (Schedule::EdgeCut, RedisKind::Cluster),
        ] {
            assert!(schedule.unfit(redis, true).is_none());
            let focused = schedule.required_faults(true, redis);
            assert!(focused.is_subset(&required_faults(true, redis)), "{schedule:?}");
            assert!(schedule.background(true, redis).is_empty());
        }
        assert!(Schedule::Quiet.required_faults(true, RedisKind::Private).is_empty());
        assert!(Schedule::Rollback.unfit(RedisKind::Cluster, true).is_some());
        assert!(Schedule::EdgeCut.unfit(RedisKind::Private, false).is_some());
    }

    #[test]
    fn the_edge_falls_behind_the_journal_once_a_round_when_it_runs() {
        for redis in [RedisKind::Private, RedisKind::Cluster] {
            let behind = |edge| sequential_round(false, redis, edge).contains(&Step::EdgeBehindJournal);
            assert!(behind(true) && !behind(false));
        }
    }

    #[test]
    fn every_builder_kill_is_followed_by_a_fault_that_clears_the_lease() {
        for redis in [RedisKind::Private, RedisKind::Cluster] {
            let round = sequential_round(true, redis, true);
            for (i, step) in round.iter().enumerate() {
                if let Step::KillBuilder(_) = step {
                    let next = round[i + 1..].iter().find(|s| !matches!(s, Step::Pause(_))).unwrap();
                    assert!(
                        matches!(next, Step::RedisRestartEmpty | Step::FlushAll | Step::Rollback),
                        "{step:?} then {next:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn the_journal_keeps_seconds_of_the_configured_appends() {
        let ci = WorkloadSettings {
            write_rate: 15.0,
            read_rate: 40.0,
            edge_read_rate: 15.0,
            batch_rate: 1.0,
            batch_write_keys: 10,
            batch_lookup_keys: 20,
            delete_rate: 3.0,
            delete_after_write_share: 0.5,
            readd_share: 0.5,
            absent_share: 0.5,
            freshness: Duration::from_secs(3),
            max_in_flight: 256,
        };
        // 15 + 1 + (1 batch of deletables + 1.5 written to be deleted at once + 1.5 written again).
        assert_eq!(journal_rate(&ci), 20.0);
        assert_eq!(journal_max_entries(&ci), 60);
        let all_at_once = WorkloadSettings { delete_after_write_share: 1.0, ..ci.clone() };
        assert_eq!(journal_rate(&all_at_once), 15.0 + 1.0 + 3.0 + 1.5, "no batch of deletables");
        let quiet = WorkloadSettings { write_rate: 1.0, batch_rate: 0.0, delete_rate: 0.0, ..ci };
        assert_eq!(journal_max_entries(&quiet), 20, "at least 20");
    }

    #[test]
    fn background_faults_fit_in_a_cycle_and_do_not_overlap_each_other() {
        for redis in [RedisKind::Private, RedisKind::Cluster] {
            let track = background(true, redis);
            for pair in track.windows(2) {
                assert!(pair[0].offset + pair[0].length < pair[1].offset);
            }
            let last = track.last().unwrap();
            assert!(last.offset + last.length < BACKGROUND_CYCLE);
        }
    }
}
