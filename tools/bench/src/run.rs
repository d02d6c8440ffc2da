//! One bench run: the side-by-side targets and the sweep ([`crate::side_by_side`],
//! [`crate::sweep`]), then the writes A/B ([`crate::writes_ab`]), as its [`BenchConfig`] asks. Every target sees the same seeded workload.

use crate::config::BenchConfig;
use crate::report::{BenchReport, Machine};
use crate::side_by_side::run_side_by_side;
use crate::writes_ab::{self, run_writes};
use std::collections::BTreeMap;
use std::time::Instant;

/// Runs everything `cfg` asks for and returns the report.
pub async fn run_bench(cfg: &BenchConfig) -> anyhow::Result<BenchReport> {
    let started = Instant::now();
    let mut report = if cfg.side_by_side { run_side_by_side(cfg).await? } else { writes_only_report(cfg) };
    if let Some(w) = &cfg.writes {
        match run_writes(cfg, w).await {
            Ok(writes) => {
                report.checks.extend(writes_ab::checks(&writes));
                report.writes = Some(writes);
            }
            // Alone, its failure is the run's; after the side-by-side run, it must not lose it.
            Err(e) if !cfg.side_by_side => return Err(e),
            Err(e) => {
                eprintln!("[loadgen] writes A/B failed: {e:#}");
                report.writes_error = Some(format!("{e:#}"));
            }
        }
    }
    report.wall_seconds = started.elapsed().as_secs_f64();
    Ok(report)
}

/// The report of a run without the side-by-side targets: the writes A/B fills it in.
fn writes_only_report(cfg: &BenchConfig) -> BenchReport {
    let mut settings = BTreeMap::new();
    settings.insert("seed".to_owned(), cfg.seed.to_string());
    settings.insert("targets".to_owned(), "writes A/B only".to_owned());
    BenchReport {
        command: cfg.command.clone(),
        machine: Machine::describe(),
        settings,
        targets: Vec::new(),
        sweep: Vec::new(),
        sweep_error: None,
        checks: Vec::new(),
        filter_stats: BTreeMap::new(),
        writes: None,
        writes_error: None,
        wall_seconds: 0.0,
    }
}
