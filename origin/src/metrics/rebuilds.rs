//! Rebuilds, per filter: whether one runs anywhere, its phase, keys read and keys expected
//! (set by every recovery check from the progress the builder publishes); and the runs this
//! origin built for rebuilds that other origins (or the `rebuild` command) started.

use super::filters::FilterLabels;
use super::{row, Row};
use crate::build_progress::BuildPhase;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

/// A running rebuild's progress: exported as gauges.
#[derive(Clone, Copy, Debug)]
pub struct RebuildGauges {
    /// Its phase.
    pub phase: BuildPhase,
    /// Keys read so far.
    pub keys_scanned: u64,
    /// Keys expected (from the old generation's fill), if known.
    pub keys_expected: Option<u64>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PhaseLabels {
    filter: String,
    phase: BuildPhase,
}

/// The rebuilds' metrics.
#[derive(Default)]
pub struct RebuildMetrics {
    running: Family<FilterLabels, Gauge>,
    phase: Family<PhaseLabels, Gauge>,
    keys_scanned: Family<FilterLabels, Gauge>,
    keys_expected: Family<FilterLabels, Gauge>,
    /// Runs of segments this origin built for a rebuild started elsewhere.
    pub runs_helped: Counter,
}

impl RebuildMetrics {
    pub(super) fn rows(&self) -> Vec<Row> {
        vec![
            row("rebuild_running", "1 while a rebuild of the filter runs anywhere.", &self.running),
            row("rebuild_phase", "1 for the running rebuild's phase.", &self.phase),
            row("rebuild_keys_scanned", "Keys the running rebuild has read.", &self.keys_scanned),
            row(
                "rebuild_keys_expected",
                "Keys the running rebuild expects (from the old generation's fill); 0 when unknown.",
                &self.keys_expected,
            ),
            row(
                "rebuild_runs_helped",
                "Runs of segments this origin scanned and merged for a rebuild another process started.",
                &self.runs_helped,
            ),
        ]
    }

    /// Exports a filter's running rebuild, or that none runs.
    pub fn set(&self, name: &str, rebuild: Option<RebuildGauges>) {
        let l = FilterLabels { filter: name.to_owned() };
        self.running.get_or_create(&l).set(i64::from(rebuild.is_some()));
        for phase in BuildPhase::ALL {
            let running = rebuild.is_some_and(|r| r.phase == phase);
            self.phase.get_or_create(&PhaseLabels { filter: name.to_owned(), phase }).set(i64::from(running));
        }
        let scanned = rebuild.map_or(0, |r| r.keys_scanned);
        self.keys_scanned.get_or_create(&l).set(i64::try_from(scanned).unwrap_or(i64::MAX));
        // 0 when unknown (no rebuild, or no old generation to estimate from): a series that
        // came and went would leave dashboards without a name to query.
        let expected = rebuild.and_then(|r| r.keys_expected).unwrap_or(0);
        self.keys_expected.get_or_create(&l).set(i64::try_from(expected).unwrap_or(i64::MAX));
    }
}
