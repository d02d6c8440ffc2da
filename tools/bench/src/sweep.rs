//! The miss-share × fp_rate sweep: Cassandra reads per lookup against theory, one filter per
//! fp_rate, every miss share against it.

use crate::config::{BenchConfig, SweepConfig};
use crate::counters::{fp_from_origin, Samples};
use crate::driver::{drive, DriveSpec};
use crate::filters::{filter_stats, preload, FilterSpec};
use crate::report::SweepPoint;
use crate::servers::Server;
use crate::workload::{present_keys, Workload};
use std::collections::BTreeMap;
use std::sync::Arc;

/// The miss-share × fp_rate sweep: one filter per fp_rate, every miss share against it.
pub(crate) async fn run_sweep(
    http: &reqwest::Client,
    cfg: &BenchConfig,
    s: &SweepConfig,
    origin: &Server,
    sweep: &mut Vec<SweepPoint>,
    stats_by_filter: &mut BTreeMap<String, serde_json::Value>,
) -> anyhow::Result<()> {
    let keys = Arc::new(present_keys(cfg.seed ^ 0x5eed, s.present));
    for &fp in &s.fp_rates {
        let sweep_filter = format!("sweep-{:016x}", rand::random::<u64>());
        cfg.step(&format!("sweep: preloading {} keys into {sweep_filter} (fp_rate {fp})", s.present));
        let spec = FilterSpec {
            name: &sweep_filter,
            fp_rate: fp,
            capacity: cfg.capacity_for(s.present as f64),
            segment_bytes: s.segment_bytes,
        };
        preload(&origin.base, &spec, &keys, cfg.progress).await?;
        for &miss in &s.miss_shares {
            let w = Workload::new(cfg.seed ^ 0x5eed, keys.clone(), miss, cfg.zipf_s);
            let before = Samples::scrape(http, &origin.base).await?;
            let spec = DriveSpec {
                label: format!("sweep fp {fp} miss {miss}"),
                base: origin.base.clone(),
                filter: sweep_filter.clone(),
                connections: cfg.connections,
                duration: None,
                max_lookups: Some(s.lookups),
                rate: None,
                progress: cfg.progress,
            };
            let stats = drive(&spec, &w).await?;
            let after = Samples::scrape(http, &origin.base).await?;
            let n = stats.lookups.max(1) as f64;
            let reads = after.delta(&before, "bloomgate_database_reads_total") / n;
            let hit_share = stats.hits as f64 / n;
            sweep.push(SweepPoint {
                fp_rate: fp,
                miss_share: miss,
                lookups: stats.lookups,
                reads_per_lookup: reads,
                theory: (1.0 - miss) + miss * fp,
                fp_observed: fp_from_origin(&before, &after, &sweep_filter),
                hit_share_measured: hit_share,
                excess_reads_per_lookup: reads - hit_share,
                excess_theory: miss * fp,
                filter_expected_fp: None,
                errors: stats.errors.total(),
                wrong_answers: stats.wrong_answers,
            });
        }
        let st = filter_stats(&origin.base, &sweep_filter).await;
        let expected = st["expected_fp_rate_now"].as_f64();
        for p in sweep.iter_mut().filter(|p| p.fp_rate == fp) {
            p.filter_expected_fp = expected;
        }
        stats_by_filter.insert(sweep_filter.clone(), st);
    }
    Ok(())
}
