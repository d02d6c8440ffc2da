//! The cluster version: which formats and duties every origin sharing one database has agreed
//! to, raised by the operator once every origin runs a release that knows the new one
//! (`bloomgate-origin upgrade finish`), never lowered. Pure: the version's meaning, this
//! build's place against it, and the decision to raise it; `gate::cluster` keeps an origin's
//! view current and reports the origin alive, `cli/upgrade` raises it.
//!
//! Why a version the cluster agrees on, beside the format every record carries: a record's
//! format lets a reader refuse what it cannot read, but a *new duty* of writers (version 2: log
//! every write in `recent_writes`, so that recovery can replay them) is only worth something
//! once every writer has it. A release that adds one does the duty from its first day, relies
//! on it only after the raise, and writes nothing older releases cannot read before it.
//!
//! | version | what every origin of the cluster does |
//! |---:|---|
//! | 1 | the releases before the cluster version: a write stores the key's row alone |
//! | 2 | a write also logs the key in `recent_writes` before it is acknowledged |
//!
//! A keyspace that records no version is at 1; one created whole by `schema apply` (or an
//! origin managing its schema) starts at [`CLUSTER_VERSION`]: no older origin ever ran on it.

use std::time::Duration;

/// The newest cluster version this build knows, and what a keyspace it creates starts at.
pub const CLUSTER_VERSION: u32 = 2;

/// The version of a cluster that recorded none: the releases before the cluster version.
pub const UNRECORDED: u32 = 1;

/// The first version at which every origin logs its writes (`recent_writes`).
pub const LOGS_RECENT_WRITES: u32 = 2;

/// What each version adds, oldest first: what `upgrade status` prints.
pub const VERSIONS: &[(u32, &str)] = &[
    (1, "a write stores the key's row alone (the releases before the cluster version)"),
    (2, "every write is also logged in recent_writes before it is acknowledged (recovery may replay them)"),
];

/// The format of the cluster version's row, and of a live origin's report.
pub const RECORD_FORMAT: i32 = 1;

/// How often an origin reads the cluster version.
pub const REFRESH_EVERY: Duration = Duration::from_secs(5);

/// How long an origin's view counts as current: past it (the database did not answer), the
/// origin does every duty it knows, as if the cluster were at [`CLUSTER_VERSION`]. So an
/// origin does a duty at most this long after the raise, whatever it could read: what a
/// reader relying on the duty must allow for after `raised_at_ms`.
pub const VIEW_FRESH_FOR: Duration = Duration::from_secs(15);

/// How often an origin reports itself alive, with the versions it knows.
pub const REPORT_EVERY: Duration = Duration::from_secs(10);

/// How recent a report must be for its origin to count as running (a few missed reports).
pub const LIVE_WITHIN: Duration = Duration::from_secs(45);

/// The cluster version as the database records it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClusterVersion {
    /// The version.
    pub version: u32,
    /// When it was raised to this version (ms since the epoch; 0: never raised).
    pub raised_at_ms: u64,
}

impl ClusterVersion {
    /// A cluster that recorded no version.
    pub const fn unrecorded() -> ClusterVersion {
        ClusterVersion { version: UNRECORDED, raised_at_ms: 0 }
    }
}

/// One origin's report that it runs, and what it knows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LiveOrigin {
    /// Who it is: host, process and start time.
    pub origin: String,
    /// Its release (the crate's version).
    pub release: String,
    /// The newest cluster version it knows.
    pub knows: u32,
    /// When it reported (ms since the epoch).
    pub reported_at_ms: u64,
}

impl LiveOrigin {
    /// Whether its report is recent enough at `now_ms` for it to count as running.
    pub fn is_live(&self, now_ms: u64) -> bool {
        now_ms.saturating_sub(self.reported_at_ms) <= LIVE_WITHIN.as_millis() as u64
    }
}

/// What this origin may do under the cluster version it last read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Standing {
    /// It knows the version: it does its duties.
    Known {
        /// Whether its writes log their keys in `recent_writes`.
        logs_recent_writes: bool,
    },
    /// The cluster was raised past what it knows: it changes nothing (writes, deletes, creates,
    /// drops and rebuilds answer 503), since newer origins may rely on duties it does not do.
    /// Lookups still work: every format they read carries its own version.
    Behind {
        /// The cluster's version.
        found: u32,
        /// The newest this build knows.
        known: u32,
    },
}

/// This origin's standing under `view`: the version it read, if it read one within
/// [`VIEW_FRESH_FOR`]. An origin that has no current view does every duty it knows: the duty
/// is only missing where the version says it may be.
pub fn standing(view: Option<u32>) -> Standing {
    match view {
        Some(found) if found > CLUSTER_VERSION => Standing::Behind { found, known: CLUSTER_VERSION },
        Some(found) => Standing::Known { logs_recent_writes: found >= LOGS_RECENT_WRITES },
        None => Standing::Known { logs_recent_writes: true },
    }
}

/// What `upgrade finish` does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Finish {
    /// The cluster is at this build's version already.
    AlreadyCurrent(u32),
    /// Raise it.
    Raise {
        /// From this version (the raise applies only if it still is).
        from: u32,
        /// To this one.
        to: u32,
    },
}

/// Why `upgrade finish` refuses.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FinishRefused {
    /// The cluster is newer than this build: run the command from the newer release.
    #[error("the cluster is at version {found}, newer than this release knows ({known}): run upgrade finish from the newest release")]
    ClusterNewer {
        /// The cluster's version.
        found: u32,
        /// This build's.
        known: u32,
    },
    /// Running origins that do not know the new version.
    #[error("{} running origin(s) do not know cluster version {target}: {}. Finish rolling them out to this release first", .behind.len(), names(.behind))]
    OriginsBehind {
        /// The version it would raise to.
        target: u32,
        /// The origins, as they reported.
        behind: Vec<LiveOrigin>,
    },
    /// Fewer origins report than the operator said run.
    #[error("{live} origin(s) report themselves running, and --origins says {expected}: origins of releases before the cluster version do not report, so finish rolling them out (or correct --origins) first")]
    TooFewReports {
        /// Live reports.
        live: usize,
        /// What the operator expected.
        expected: usize,
    },
}

fn names(origins: &[LiveOrigin]) -> String {
    origins
        .iter()
        .map(|o| format!("{} (release {}, knows {})", o.origin, o.release, o.knows))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Whether `upgrade finish` may raise the cluster from `current` to this build's version, given
/// the origins' reports at `now_ms` and, if the operator gave it, how many origins run (origins
/// of releases before the cluster version never report: the count is how they are noticed).
pub fn finish(
    current: u32,
    reports: &[LiveOrigin],
    now_ms: u64,
    expected_origins: Option<usize>,
) -> Result<Finish, FinishRefused> {
    if current > CLUSTER_VERSION {
        return Err(FinishRefused::ClusterNewer { found: current, known: CLUSTER_VERSION });
    }
    if current == CLUSTER_VERSION {
        return Ok(Finish::AlreadyCurrent(current));
    }
    let live: Vec<&LiveOrigin> = reports.iter().filter(|r| r.is_live(now_ms)).collect();
    let behind: Vec<LiveOrigin> = live.iter().filter(|r| r.knows < CLUSTER_VERSION).map(|r| (*r).clone()).collect();
    if !behind.is_empty() {
        return Err(FinishRefused::OriginsBehind { target: CLUSTER_VERSION, behind });
    }
    if let Some(expected) = expected_origins {
        if live.len() < expected {
            return Err(FinishRefused::TooFewReports { live: live.len(), expected });
        }
    }
    Ok(Finish::Raise { from: current, to: CLUSTER_VERSION })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(origin: &str, knows: u32, reported_at_ms: u64) -> LiveOrigin {
        LiveOrigin { origin: origin.into(), release: "0.2.0".into(), knows, reported_at_ms }
    }

    #[test]
    fn an_origin_does_the_duties_of_the_version_it_read_and_all_it_knows_without_one() {
        assert_eq!(standing(Some(1)), Standing::Known { logs_recent_writes: false });
        assert_eq!(standing(Some(2)), Standing::Known { logs_recent_writes: true });
        assert_eq!(standing(None), Standing::Known { logs_recent_writes: true }, "no view: every duty");
        assert_eq!(standing(Some(3)), Standing::Behind { found: 3, known: CLUSTER_VERSION });
    }

    #[test]
    fn finish_raises_only_when_every_live_origin_knows_the_version() {
        let now = 1_000_000;
        let current = [report("a", 2, now - 1_000), report("b", 2, now - 5_000)];
        assert_eq!(finish(1, &current, now, None), Ok(Finish::Raise { from: 1, to: 2 }));
        let mixed = [report("a", 2, now), report("old", 1, now - 2_000)];
        match finish(1, &mixed, now, None) {
            Err(e @ FinishRefused::OriginsBehind { .. }) => assert!(e.to_string().contains("old (release"), "{e}"),
            other => panic!("{other:?}"),
        }
        // A report older than LIVE_WITHIN is an origin gone (a pod replaced).
        let gone = [report("a", 2, now), report("old", 1, now - LIVE_WITHIN.as_millis() as u64 - 1)];
        assert_eq!(finish(1, &gone, now, None), Ok(Finish::Raise { from: 1, to: 2 }));
    }

    #[test]
    fn finish_counts_the_origins_the_operator_says_run() {
        let now = 1_000_000;
        let one = [report("a", 2, now)];
        assert_eq!(finish(1, &one, now, Some(2)), Err(FinishRefused::TooFewReports { live: 1, expected: 2 }));
        assert_eq!(finish(1, &one, now, Some(1)), Ok(Finish::Raise { from: 1, to: 2 }));
    }

    #[test]
    fn finish_never_lowers_and_is_idempotent() {
        assert_eq!(finish(2, &[], 0, None), Ok(Finish::AlreadyCurrent(2)));
        assert_eq!(finish(3, &[], 0, None), Err(FinishRefused::ClusterNewer { found: 3, known: CLUSTER_VERSION }));
    }

    #[test]
    fn every_version_up_to_this_builds_is_described() {
        let described: Vec<u32> = VERSIONS.iter().map(|(v, _)| *v).collect();
        assert_eq!(described, (1..=CLUSTER_VERSION).collect::<Vec<_>>());
    }
}
