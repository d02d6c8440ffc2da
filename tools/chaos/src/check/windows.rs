//! Fault windows, as the error rules ask about them: which fault the excuse table names for an
//! error (see [`excuses`](super::excuses)), whether the filter may have been unable to answer
//! during a lookup, and whether the database may have failed it. Nothing else in the checker
//! looks at windows: no window excuses a false negative, a missing Retry-After or another
//! status.

use super::excuses::{self, ErrorKind, Failed, FaultSpan};
use crate::history::{Fault, FaultKind, Micros};

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

/// The run's faults, as the error rules read them.
pub(super) struct FaultWindows {
    spans: Vec<FaultSpan>,
    /// While the filter may not answer lookups (until a second after the fault's end).
    filter_unavailable: Windows,
    /// While the database may fail lookups of keys the filter says "maybe" for.
    database_down: Windows,
    /// Every fault's window stretched by the longest time its rows excuse after its end.
    any: Windows,
    edge_origin: u8,
    freshness: Micros,
}

impl FaultWindows {
    pub(super) fn new(faults: &[Fault], edge_origin: u8, freshness: Micros) -> FaultWindows {
        let spans: Vec<FaultSpan> =
            faults.iter().map(|f| FaultSpan { kind: f.kind, start: f.start, end: f.end, origin: f.origin }).collect();
        let of = |keep: fn(FaultKind) -> bool, after: &dyn Fn(FaultKind) -> Micros| {
            Windows::new(spans.iter().filter(|f| keep(f.kind)).map(|f| (f.start, f.end + after(f.kind))).collect())
        };
        let database_after = |kind| excuses::longest_after(kind, freshness);
        FaultWindows {
            filter_unavailable: of(excuses::filter_unavailable, &|_| 1_000_000),
            database_down: of(excuses::fails_maybes, &database_after),
            any: of(|_| true, &|kind| excuses::longest_after(kind, freshness).max(1_000_000)),
            spans,
            edge_origin,
            freshness,
        }
    }

    /// The fault the excuse table names for `op`'s error, if any.
    pub(super) fn excused_by(&self, op: &Failed) -> Option<FaultKind> {
        excuses::excused_by(&self.spans, op, self.edge_origin, self.freshness)
    }

    /// Whether the filter may have been unable to answer during `[start, end]`.
    pub(super) fn filter_unavailable(&self, start: Micros, end: Micros) -> bool {
        self.filter_unavailable.overlaps(start, end)
    }

    /// Whether the database may have failed a lookup over `[start, end]`.
    pub(super) fn database_down(&self, start: Micros, end: Micros) -> bool {
        self.database_down.overlaps(start, end)
    }

    /// Whether `[start, end]` overlaps no fault's window (each until the longest its rows
    /// excuse after its end, at least a second).
    pub(super) fn outside_every_fault(&self, start: Micros, end: Micros) -> bool {
        !self.any.overlaps(start, end)
    }

    /// Injected faults (not observed stalls) whose own window `[start, end]` overlaps `[start, end]`.
    pub(super) fn injected_during(&self, start: Micros, end: Micros) -> impl Iterator<Item = FaultKind> + '_ {
        self.spans.iter().filter(move |f| !f.kind.is_observed() && f.start <= end && start <= f.end).map(|f| f.kind)
    }
}

/// The error an unexcused-or-excused failure is, by how the operation ended; None for an
/// answer that is no error the table knows (a 503/429 without Retry-After, another status).
pub(super) fn error_kind(outcome: &crate::history::Outcome) -> Option<ErrorKind> {
    use crate::history::Outcome;
    match outcome {
        Outcome::Status { code: 503, retry_after: true, .. } => Some(ErrorKind::Unavailable),
        Outcome::Status { code: 429, retry_after: true, .. } => Some(ErrorKind::Overloaded),
        Outcome::Transport { .. } => Some(ErrorKind::NoAnswer),
        _ => None,
    }
}
