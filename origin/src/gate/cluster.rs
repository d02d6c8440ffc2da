//! This origin in its cluster: the cluster version it last read (see `cluster_version`), kept
//! current by [`watch`], which also reports the origin alive with the newest version it knows;
//! and what the version lets it do: whether its writes log their keys, and whether it may change
//! anything at all.

use super::Gate;
use crate::cluster_version::Finish;
use crate::cluster_version::{
    self, LiveOrigin, Standing, CLUSTER_VERSION, REFRESH_EVERY, REPORT_EVERY, VIEW_FRESH_FOR,
};
use crate::error::AppError;
use crate::store::{Database, DatabaseError};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// The cluster version as this origin last read it, and when.
#[derive(Default)]
pub struct ClusterView {
    read: Mutex<Option<(u32, Instant)>>,
}

impl ClusterView {
    /// Records a version read now; says whether it differs from the one read before.
    fn saw(&self, version: u32) -> Option<u32> {
        let mut read = self.read.lock().unwrap_or_else(|e| e.into_inner());
        let before = read.map(|(v, _)| v);
        *read = Some((version, Instant::now()));
        (before != Some(version)).then_some(version)
    }

    /// The version read within [`VIEW_FRESH_FOR`], if any.
    pub fn current(&self) -> Option<u32> {
        let read = self.read.lock().unwrap_or_else(|e| e.into_inner());
        read.filter(|(_, at)| at.elapsed() <= VIEW_FRESH_FOR).map(|(v, _)| v)
    }

    /// What this origin may do now.
    pub fn standing(&self) -> Standing {
        cluster_version::standing(self.current())
    }
}

impl Gate {
    /// The cluster version as this origin last read it.
    pub fn cluster(&self) -> &ClusterView {
        &self.cluster
    }

    /// Refuses a change (a write, delete, create, drop or rebuild) while the cluster is at a
    /// version newer than this origin knows.
    pub(crate) fn may_change(&self) -> Result<(), AppError> {
        match self.cluster.standing() {
            Standing::Known { .. } => Ok(()),
            Standing::Behind { found, known } => Err(AppError::ClusterAhead { found, known }),
        }
    }

    /// Whether this origin's writes log their keys in `recent_writes` now.
    pub(crate) fn logs_recent_writes(&self) -> bool {
        matches!(self.cluster.standing(), Standing::Known { logs_recent_writes: true })
    }
}

/// Why `upgrade finish` did not raise the cluster version.
#[derive(Debug, thiserror::Error)]
pub enum FinishError {
    /// The decision refused it (origins behind, too few reports, a newer cluster).
    #[error(transparent)]
    Refused(#[from] cluster_version::FinishRefused),
    /// The database did not answer.
    #[error("{0}")]
    Database(#[from] DatabaseError),
    /// Someone changed the version between the read and the raise.
    #[error("the cluster version changed while this command ran (another upgrade finish?): run upgrade status, then this again")]
    Raced,
}

/// `upgrade finish`: reads the cluster version and the origins' reports, and raises the version
/// to this build's if [`cluster_version::finish`] allows it (a compare-and-set on the version
/// read). `expected_origins`: how many origins the operator says run.
pub async fn finish_upgrade(database: &dyn Database, expected_origins: Option<usize>) -> Result<Finish, FinishError> {
    let (version, reports) = (database.cluster_version().await?, database.origin_reports().await?);
    let finish = cluster_version::finish(version.version, &reports, crate::clock::now_ms(), expected_origins)?;
    if let Finish::Raise { from, to } = finish {
        if !database.raise_cluster_version(from, to).await? {
            return Err(FinishError::Raced);
        }
        tracing::info!(from, to, "raised the cluster version");
    }
    Ok(finish)
}

/// Who this origin is in its reports: host, process and start time, so that a restarted
/// process is a new origin and the old one's report simply expires.
pub fn origin_identity() -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unknown-host".into());
    format!("{host}/{}/{}", std::process::id(), crate::clock::now_ms())
}

/// Reads the cluster version every [`REFRESH_EVERY`] and reports this origin alive every
/// [`REPORT_EVERY`], until the process ends. A failed read or report is retried at the next
/// round: meanwhile the view ages out, and the origin does every duty it knows.
pub async fn watch(gate: Arc<Gate>) {
    let origin = origin_identity();
    let release = env!("CARGO_PKG_VERSION").to_owned();
    let mut reported: Option<Instant> = None;
    loop {
        match gate.database.cluster_version().await {
            Ok(read) => {
                if let Some(version) = gate.cluster.saw(read.version) {
                    match cluster_version::standing(Some(version)) {
                        Standing::Behind { found, known } => tracing::error!(
                            found,
                            known,
                            "the cluster was upgraded past what this origin knows: it refuses every change (503) and still answers lookups; upgrade this origin"
                        ),
                        Standing::Known { logs_recent_writes } => {
                            tracing::info!(version, logs_recent_writes, "cluster version")
                        }
                    }
                }
            }
            Err(e) => tracing::debug!(cause = %e, "cluster version not read"),
        }
        if reported.is_none_or(|at| at.elapsed() >= REPORT_EVERY) {
            let report = LiveOrigin {
                origin: origin.clone(),
                release: release.clone(),
                knows: CLUSTER_VERSION,
                reported_at_ms: crate::clock::now_ms(),
            };
            match gate.database.report_origin(&report).await {
                Ok(()) => reported = Some(Instant::now()),
                Err(e) => tracing::debug!(cause = %e, "origin report not written"),
            }
        }
        tokio::time::sleep(REFRESH_EVERY).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_view_counts_only_while_fresh_and_says_when_it_changed() {
        let view = ClusterView::default();
        assert_eq!(view.current(), None);
        assert_eq!(view.standing(), Standing::Known { logs_recent_writes: true });
        assert_eq!(view.saw(1), Some(1));
        assert_eq!(view.saw(1), None);
        assert_eq!(view.standing(), Standing::Known { logs_recent_writes: false });
        *view.read.lock().unwrap() = Some((1, Instant::now() - VIEW_FRESH_FOR - std::time::Duration::from_millis(1)));
        assert_eq!(view.current(), None, "an old view is no view");
        assert_eq!(view.standing(), Standing::Known { logs_recent_writes: true });
        assert_eq!(view.saw(CLUSTER_VERSION + 1), Some(CLUSTER_VERSION + 1));
        assert!(matches!(view.standing(), Standing::Behind { .. }));
    }
}
