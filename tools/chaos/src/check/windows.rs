//! Fault windows, as the error rules ask about them: when a 503/429 with Retry-After is
//! excused (an injected fault, or a stall the prober observed, each until the allowance after
//! its end), and when an origin could not answer at all (its own `kill -9`). Nothing else in
//! the checker looks at windows: no window excuses a false negative, a missing Retry-After or
//! another status.

use crate::history::{Fault, FaultKind, Micros};
use std::collections::HashMap;

/// Time intervals, merged; asks whether an interval overlaps any of them.
#[derive(Clone, Debug, Default)]
pub(super) struct Windows(pub(super) Vec<(Micros, Micros)>);

impl Windows {
    pub(super) fn new(mut spans: Vec<(Micros, Micros)>) -> Windows {
        spans.sort_unstable();
        let mut merged: Vec<(Micros, Micros)> = Vec::with_capacity(spans.len());
        for (start, end) in spans {
            match merged.last_mut() {
                Some(last) if start <= last.1 => last.1 = last.1.max(end),
                _ => merged.push((start, end)),
            }
        }
        Windows(merged)
    }

    /// Whether `[start, end]` overlaps a window.
    pub(super) fn overlaps(&self, start: Micros, end: Micros) -> bool {
        // The first window ending at or after `start`; it overlaps if it begins by `end`.
        let i = self.0.partition_point(|w| w.1 < start);
        self.0.get(i).is_some_and(|w| w.0 <= end)
    }
}

fn is_kill(kind: FaultKind) -> bool {
    matches!(kind, FaultKind::KillBuilderSettling | FaultKind::KillBuilderScanning | FaultKind::KillBuilderUploading)
}

/// Why an unavailable answer was tolerated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Excuse {
    /// An injected fault's window.
    Injected,
    /// Only a stall the prober observed.
    Observed,
}

/// The run's fault windows, each stretched by the allowance.
pub(super) struct FaultWindows {
    injected: Windows,
    observed: Windows,
    down: HashMap<u8, Windows>,
}

impl FaultWindows {
    pub(super) fn new(faults: &[Fault], allowance: Micros) -> FaultWindows {
        let span = |f: &Fault| (f.start, f.end + allowance);
        let injected = Windows::new(faults.iter().filter(|f| !f.kind.is_observed()).map(span).collect());
        let observed = Windows::new(faults.iter().filter(|f| f.kind.is_observed()).map(span).collect());
        let mut down: HashMap<u8, Vec<(Micros, Micros)>> = HashMap::new();
        for f in faults.iter().filter(|f| is_kill(f.kind)) {
            if let Some(origin) = f.origin {
                down.entry(origin).or_default().push(span(f));
            }
        }
        let down = down.into_iter().map(|(o, spans)| (o, Windows::new(spans))).collect();
        FaultWindows { injected, observed, down }
    }

    /// Whether a 503/429 with Retry-After over `[start, end]` is excused, and by what.
    pub(super) fn unavailable(&self, start: Micros, end: Micros) -> Option<Excuse> {
        if self.injected.overlaps(start, end) {
            Some(Excuse::Injected)
        } else if self.observed.overlaps(start, end) {
            Some(Excuse::Observed)
        } else {
            None
        }
    }

    /// Whether `origin` was killed (or not back yet) during `[start, end]`.
    pub(super) fn killed(&self, origin: u8, start: Micros, end: Micros) -> bool {
        self.down.get(&origin).is_some_and(|w| w.overlaps(start, end))
    }
}
