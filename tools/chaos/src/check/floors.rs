//! Evidence floors: what a run must have shown to count, beside having no violation. A history
//! with no violation proves little if it checked little: an edge that forwards everything, local
//! copies that never answer, a product that refuses most operations once faults start. Each
//! floor is a formula of the run's configured duration T and rates (never of how fast the
//! machine was), so the same run is held to the same floors on a quiet and on a busy machine;
//! the shares leave room for what faults legitimately refuse.
//!
//! Rates (per second, as configured): W single writes, R origin lookups, E edge lookups, B batch
//! writes (and as many batch lookups, half of them at the edge when it runs), Kw keys per batch
//! write, Kl keys per batch lookup, a the share of random lookups for never-written keys, D
//! deletes, p the share of them sent right after their key's write, d the share of deleted keys
//! written again; N origins, S the edge's bound.
//!
//! With read leases on (the default), each origin must also have answered "no" from memory under
//! its lease for a share of the never-written keys it was asked about: a run whose leases never
//! held proves nothing about them.

use super::CheckResult;
use crate::history::{FaultKind, History};
use crate::workload::WorkloadSettings;
use serde::Serialize;
use std::collections::BTreeSet;

/// Share of the expected count a counting floor requires.
pub const SHARE: f64 = 0.25;

/// Share of operations outside every fault's window that must succeed.
pub const SUCCESS_OUTSIDE_FAULTS: f64 = 0.99;

/// What the floors are computed from.
#[derive(Clone, Debug)]
pub struct FloorSettings {
    /// The run's configured duration T, seconds.
    pub duration_secs: f64,
    /// Origins N.
    pub origins: usize,
    /// Whether the edge ran.
    pub edge: bool,
    /// The edge's freshness bound S, seconds.
    pub freshness_secs: f64,
    /// The rates.
    pub workload: WorkloadSettings,
    /// Every fault kind the schedule holds.
    pub required_faults: BTreeSet<FaultKind>,
    /// Whether the origins answer under read leases.
    pub leases: bool,
}

/// One floor, as the report shows it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Floor {
    /// What is counted.
    pub name: String,
    /// How `required` is computed.
    pub formula: String,
    /// The least that counts.
    pub required: f64,
    /// What the run showed.
    pub seen: f64,
    /// `seen >= required`.
    pub met: bool,
}

fn floor(name: impl Into<String>, formula: impl Into<String>, required: f64, seen: f64) -> Floor {
    let required = (required * 1000.0).round() / 1000.0;
    Floor { name: name.into(), formula: formula.into(), required, seen, met: seen >= required }
}

/// Keys per second the workload reads back at the origins that must be seen there (reads after
/// each write, a share of the random lookups and batch lookups), and at the edge.
fn must_be_seen_rates(s: &FloorSettings) -> (f64, f64) {
    let w = &s.workload;
    let edge_batches = if s.edge { w.batch_rate / 2.0 } else { 0.0 };
    let origin_batches = w.batch_rate - edge_batches;
    let written = 1.0 - w.absent_share;
    let origin = w.write_rate
        + w.batch_rate * w.batch_write_keys as f64
        + written * (w.read_rate + origin_batches * w.batch_lookup_keys as f64);
    let edge = w.write_rate
        + w.batch_rate * w.batch_write_keys as f64
        + written * (w.edge_read_rate + edge_batches * w.batch_lookup_keys as f64);
    (origin, edge)
}

/// Keys per second looked up at the origins (every one offered to a local copy), and
/// never-written keys per second looked up at the edge.
fn lookup_rates(s: &FloorSettings) -> (f64, f64) {
    let w = &s.workload;
    let edge_batches = if s.edge { w.batch_rate / 2.0 } else { 0.0 };
    let origin_batches = w.batch_rate - edge_batches;
    let origin = w.write_rate
        + w.batch_rate * w.batch_write_keys as f64
        + w.read_rate
        + origin_batches * w.batch_lookup_keys as f64;
    let edge_absent = w.absent_share * (w.edge_read_rate + edge_batches * w.batch_lookup_keys as f64);
    (origin, edge_absent)
}

/// Never-written keys per second looked up at the origins (each a "no" a copy may answer under
/// its lease).
fn absent_origin_rate(s: &FloorSettings) -> f64 {
    let w = &s.workload;
    let origin_batches = if s.edge { w.batch_rate / 2.0 } else { w.batch_rate };
    w.absent_share * (w.read_rate + origin_batches * w.batch_lookup_keys as f64)
}

/// Every floor of the run, met or not.
pub fn evaluate(history: &History, result: &CheckResult, s: &FloorSettings) -> Vec<Floor> {
    let t = s.duration_secs;
    let n = s.origins.max(1) as f64;
    let c = &result.checked;
    let (seen_origin, seen_edge) = must_be_seen_rates(s);
    let (looked_up, edge_absent) = lookup_rates(s);
    let origin_absent = absent_origin_rate(s);
    let mut floors = Vec::new();
    for o in 0..s.origins as u8 {
        let seen = c.must_be_seen_by_origin.get(&o).copied().unwrap_or(0);
        let formula = format!("{SHARE} × T × (W + B·Kw + (1−a)·(R + B_origin·Kl)) / N");
        floors.push(floor(format!("must_be_seen_origin-{o}"), formula, SHARE * t * seen_origin / n, seen as f64));
        let answered = history.origin_counters.get(&o).map_or(0, |c| c.copy_answered);
        let formula = format!("{SHARE} × T × (W + B·Kw + R + B_origin·Kl) / N");
        floors.push(floor(format!("copy_answered_origin-{o}"), formula, SHARE * t * looked_up / n, answered as f64));
        if s.leases {
            let leased = history.origin_counters.get(&o).map_or(0, |c| c.lease_answered);
            let formula = format!("{SHARE} × T × a·(R + B_origin·Kl) / N");
            floors.push(floor(
                format!("lease_answered_origin-{o}"),
                formula,
                SHARE * t * origin_absent / n,
                leased as f64,
            ));
        }
    }
    if s.edge {
        let formula = format!("{SHARE} × (T − S) × (W + B·Kw + (1−a)·(E + B/2·Kl))");
        floors.push(floor(
            "must_be_seen_edge",
            formula,
            SHARE * (t - s.freshness_secs) * seen_edge,
            c.must_be_seen_edge as f64,
        ));
        let formula = format!("{SHARE} × T × a·(E + B/2·Kl)");
        floors.push(floor("edge_no_answers", formula, SHARE * t * edge_absent, c.edge_no_answers as f64));
        let resets: u64 = history.origin_counters.values().map(|c| c.journal_gone + c.copy_resets).sum();
        floors.push(floor("journal_resets", "1 (the edge cut outlasts the journal's retention)", 1.0, resets as f64));
    }
    if s.workload.delete_rate > 0.0 && s.workload.readd_share > 0.0 {
        let formula = format!("{SHARE} × T × D × d");
        let required = SHARE * t * s.workload.delete_rate * s.workload.readd_share;
        floors.push(floor("readded_must_be_seen", formula, required, c.must_be_seen_readded as f64));
    }
    if s.workload.delete_rate > 0.0 && s.workload.delete_after_write_share > 0.0 {
        // Each delete right after a write is read back at once through an origin, and through
        // the edge unless the key is written again at once (that read may then race the write).
        let (formula, reads) = if s.edge {
            (format!("{SHARE} × T × D × p × (2 − d)"), 2.0 - s.workload.readd_share)
        } else {
            (format!("{SHARE} × T × D × p"), 1.0)
        };
        let required = SHARE * t * s.workload.delete_rate * s.workload.delete_after_write_share * reads;
        let seen = c.must_be_not_seen_after_delete as f64;
        floors.push(floor("must_be_not_seen_after_delete", formula, required, seen));
    }
    // A loss of Redis's data must have been recovered from a checkpoint at least once: a run
    // whose recoveries all scanned proves nothing about the replay.
    let losses =
        [FaultKind::RedisRestartEmpty, FaultKind::FlushAll, FaultKind::RedisRollback, FaultKind::RedisMasterKill];
    if losses.iter().any(|kind| s.required_faults.contains(kind)) {
        let recovered: u64 = history.origin_counters.values().map(|c| c.recovered_from_checkpoint).sum();
        let formula = "1 (a loss of Redis's data recovered from a checkpoint and the log, not a scan)";
        floors.push(floor("recovered_from_checkpoint", formula, 1.0, recovered as f64));
    }
    floors.extend(fault_floors(history, s));
    let outside = &result.availability.ops_outside;
    let formula = format!("{SUCCESS_OUTSIDE_FAULTS} of the operations overlapping no fault's window");
    floors.push(floor("success_outside_faults", formula, SUCCESS_OUTSIDE_FAULTS, outside.ratio().unwrap_or(0.0)));
    floors
}

/// Every fault kind of the schedule injected; a local copy held at each Redis going back in time.
fn fault_floors(history: &History, s: &FloorSettings) -> Vec<Floor> {
    let injected: BTreeSet<FaultKind> = history.faults.iter().map(|f| f.kind).collect();
    let required = s.required_faults.len() as f64;
    let seen = s.required_faults.intersection(&injected).count() as f64;
    let mut floors = vec![floor("fault_kinds_injected", "every kind of the schedule", required, seen)];
    let back_in_time: Vec<_> = history.faults.iter().filter(|f| f.copy_held.is_some()).collect();
    if !back_in_time.is_empty() {
        let held = back_in_time.iter().filter(|f| f.copy_held == Some(true)).count() as f64;
        let formula = "every rollback and master kill";
        floors.push(floor("copy_held_when_redis_went_back", formula, back_in_time.len() as f64, held));
    }
    floors
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::{check, CheckSettings};
    use crate::history::{Fault, OriginCounters};
    use std::time::Duration;

    fn settings() -> FloorSettings {
        let workload = WorkloadSettings {
            write_rate: 10.0,
            read_rate: 40.0,
            edge_read_rate: 20.0,
            batch_rate: 1.0,
            batch_write_keys: 10,
            batch_lookup_keys: 20,
            delete_rate: 2.0,
            delete_after_write_share: 0.5,
            readd_share: 0.5,
            absent_share: 0.5,
            freshness: Duration::from_secs(3),
            max_in_flight: 10,
        };
        let required_faults = [FaultKind::FlushAll, FaultKind::RedisRollback].into();
        FloorSettings {
            duration_secs: 100.0,
            origins: 2,
            edge: true,
            freshness_secs: 3.0,
            workload,
            required_faults,
            leases: true,
        }
    }

    fn named<'a>(floors: &'a [Floor], name: &str) -> &'a Floor {
        floors.iter().find(|f| f.name == name).unwrap_or_else(|| panic!("no floor {name}: {floors:?}"))
    }

    #[test]
    fn floors_follow_the_configured_rates_and_fail_an_empty_run() {
        let history = History::default();
        let result = check(
            &history,
            &CheckSettings { freshness: 3_000_000, edge_origin: 0, rss_limit_kib: 1, edge_rss_limit_kib: 1 },
        );
        let floors = evaluate(&history, &result, &settings());
        // Per origin: 0.25 × 100 × (10 + 10 + 0.5 × (40 + 0.5 × 20)) / 2 = 562.5.
        assert_eq!(named(&floors, "must_be_seen_origin-1").required, 562.5);
        // 0.25 × 97 × (10 + 10 + 0.5 × (20 + 10)) = 848.75.
        assert_eq!(named(&floors, "must_be_seen_edge").required, 848.75);
        // 0.25 × 100 × 0.5 × (20 + 10) = 375.
        assert_eq!(named(&floors, "edge_no_answers").required, 375.0);
        assert_eq!(named(&floors, "copy_answered_origin-0").required, 0.25 * 100.0 * 70.0 / 2.0);
        assert_eq!(named(&floors, "readded_must_be_seen").required, 25.0);
        // 0.25 × 100 × 2 × 0.5 × (1 + 0.5) = 37.5, and without the edge, the origins' reads alone.
        assert_eq!(named(&floors, "must_be_not_seen_after_delete").required, 37.5);
        let no_edge = evaluate(&history, &result, &FloorSettings { edge: false, ..settings() });
        assert_eq!(named(&no_edge, "must_be_not_seen_after_delete").required, 25.0);
        // 0.25 × 100 × 0.5 × (40 + 0.5 × 20) / 2 = 312.5.
        assert_eq!(named(&floors, "lease_answered_origin-1").required, 312.5);
        let barrier = evaluate(&history, &result, &FloorSettings { leases: false, ..settings() });
        assert!(barrier.iter().all(|f| !f.name.starts_with("lease_answered")), "no lease floor in barrier mode");
        assert!(floors.iter().all(|f| !f.met || f.name == "copy_held_when_redis_went_back"), "{floors:?}");
    }

    #[test]
    fn counters_faults_and_copies_held_are_read_from_the_history() {
        let fault = |kind, copy_held| Fault {
            kind,
            start: 0,
            end: 1,
            origin: None,
            recovered: None,
            note: String::new(),
            copy_held,
        };
        let mut history = History {
            faults: vec![fault(FaultKind::FlushAll, None), fault(FaultKind::RedisRollback, Some(true))],
            ..History::default()
        };
        let counters =
            OriginCounters { copy_answered: 900, lease_answered: 400, journal_gone: 1, ..Default::default() };
        history.origin_counters.insert(0, counters);
        let result = check(
            &history,
            &CheckSettings { freshness: 3_000_000, edge_origin: 0, rss_limit_kib: 1, edge_rss_limit_kib: 1 },
        );
        let floors = evaluate(&history, &result, &settings());
        assert!(named(&floors, "copy_answered_origin-0").met);
        assert!(!named(&floors, "copy_answered_origin-1").met);
        assert!(named(&floors, "lease_answered_origin-0").met && !named(&floors, "lease_answered_origin-1").met);
        assert!(named(&floors, "journal_resets").met);
        assert!(named(&floors, "fault_kinds_injected").met);
        assert!(named(&floors, "copy_held_when_redis_went_back").met);
        history.faults.push(fault(FaultKind::RedisRollback, Some(false)));
        let floors = evaluate(&history, &result, &settings());
        assert!(!named(&floors, "copy_held_when_redis_went_back").met, "one rollback without a copy held");
    }
}
