//! Availability beside safety: the share of writes acknowledged while each kind of fault was
//! on (a write counts for every kind whose window its own overlaps), and of writes and of all
//! operations outside every fault's window. Measured, not judged: the floors read the last.

use super::windows::FaultWindows;
use crate::history::{FaultKind, History, Outcome};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};

/// How many of some operations succeeded.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Share {
    /// Operations attempted.
    pub total: u64,
    /// Of those, acknowledged or answered.
    pub ok: u64,
}

impl Share {
    fn count(&mut self, ok: bool) {
        self.total += 1;
        self.ok += u64::from(ok);
    }

    /// `ok / total`, None without operations.
    pub fn ratio(&self) -> Option<f64> {
        (self.total > 0).then(|| self.ok as f64 / self.total as f64)
    }
}

/// What the run measured of availability.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Availability {
    /// Per fault kind: writes (single and batch) overlapping its window, and those acknowledged.
    pub writes_during: BTreeMap<FaultKind, Share>,
    /// Writes overlapping no fault's window (each stretched as the excuse table stretches it).
    pub writes_outside: Share,
    /// Every operation overlapping no fault's window, the ones skipped at the client's in-flight
    /// cap included (as failures).
    pub ops_outside: Share,
}

/// Measures the history.
pub(super) fn measure(history: &History, windows: &FaultWindows) -> Availability {
    let mut a = Availability::default();
    for op in &history.ops {
        let ok = matches!(op.outcome, Outcome::Acked | Outcome::Answers(_));
        let outside = windows.outside_every_fault(op.start, op.end);
        if outside {
            a.ops_outside.count(ok);
        }
        if !op.kind.is_write() {
            continue;
        }
        if outside {
            a.writes_outside.count(ok);
        }
        let during: BTreeSet<FaultKind> = windows.injected_during(op.start, op.end).collect();
        for kind in during {
            a.writes_during.entry(kind).or_default().count(ok);
        }
    }
    for skipped in &history.skipped {
        if windows.outside_every_fault(skipped.at, skipped.at) {
            a.ops_outside.count(false);
        }
    }
    a
}
