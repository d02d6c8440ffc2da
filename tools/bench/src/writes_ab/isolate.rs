//! What the edge isolate said about itself over a front run: from its report
//! (`GET /_bloomgate/isolate`) before and after, the Cache API reads and writes, the copies the
//! journal tail brought forward, the CPU by kind of work, and its memory at the end.

use bloomgate_client::api::{CpuFigure, IsolateReport};
use serde::Serialize;
use std::collections::BTreeMap;

const MIB: f64 = 1024.0 * 1024.0;

/// The isolate's figures over a measured run.
#[derive(Clone, Debug, Serialize)]
pub struct IsolateFigures {
    /// Cache API reads per front lookup.
    pub cache_reads_per_lookup: f64,
    /// Of those, reads that found a segment, per front lookup.
    pub cache_hits_per_lookup: f64,
    /// Segments put in the Cache API after an origin fetch.
    pub cache_puts: u64,
    /// Copies written back to the Cache API after the journal brought them forward.
    pub cache_write_backs: u64,
    /// Copies brought forward from the isolate's journal tail, per front lookup.
    pub local_catch_ups_per_lookup: f64,
    /// CPU per unit of work on the isolate's clock, µs: `edge_no`, `forwarded`, `batch_key`,
    /// `catch_up`, `segment_decode` (absent when none ran).
    pub cpu_us: BTreeMap<String, f64>,
    /// How many of each the CPU figures cover.
    pub cpu_counts: BTreeMap<String, u64>,
    /// wasm memory at the end, MiB.
    pub wasm_mib: f64,
    /// Held at the end, MiB.
    pub held_mib: f64,
    /// The budget, MiB.
    pub budget_mib: f64,
}

fn between(a: &CpuFigure, b: &CpuFigure) -> CpuFigure {
    CpuFigure {
        count: b.count.saturating_sub(a.count),
        total_ms: (b.total_ms - a.total_ms).max(0.0),
        set_aside: b.set_aside.saturating_sub(a.set_aside),
    }
}

impl IsolateFigures {
    /// From the reports before (`a`) and after (`b`) a run of `lookups` front lookups.
    pub fn between(a: &IsolateReport, b: &IsolateReport, lookups: u64) -> IsolateFigures {
        let n = lookups.max(1) as f64;
        let (ca, cb) = (&a.counts, &b.counts);
        let mut cpu_us = BTreeMap::new();
        let mut cpu_counts = BTreeMap::new();
        for (name, fa, fb) in [
            ("edge_no", &a.cpu.edge_no, &b.cpu.edge_no),
            ("forwarded", &a.cpu.forwarded, &b.cpu.forwarded),
            ("batch_key", &a.cpu.batch_key, &b.cpu.batch_key),
            ("catch_up", &a.cpu.catch_up, &b.cpu.catch_up),
            ("segment_decode", &a.cpu.segment_decode, &b.cpu.segment_decode),
        ] {
            let d = between(fa, fb);
            if let Some(us) = d.us_each() {
                cpu_us.insert(name.to_owned(), us);
            }
            cpu_counts.insert(name.to_owned(), d.count);
        }
        IsolateFigures {
            cache_reads_per_lookup: cb.cache_reads.saturating_sub(ca.cache_reads) as f64 / n,
            cache_hits_per_lookup: cb.cache_hits.saturating_sub(ca.cache_hits) as f64 / n,
            cache_puts: cb.cache_puts.saturating_sub(ca.cache_puts),
            cache_write_backs: cb.cache_write_backs.saturating_sub(ca.cache_write_backs),
            local_catch_ups_per_lookup: cb.local_catch_ups.saturating_sub(ca.local_catch_ups) as f64 / n,
            cpu_us,
            cpu_counts,
            wasm_mib: b.wasm_bytes as f64 / MIB,
            held_mib: b.held.total as f64 / MIB,
            budget_mib: b.budget_bytes as f64 / MIB,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_are_differences_over_the_run() {
        let mut a = IsolateReport::default();
        a.counts.cache_reads = 10;
        a.cpu.edge_no = CpuFigure { count: 100, total_ms: 5.0, set_aside: 0 };
        let mut b = a.clone();
        b.counts.cache_reads = 60;
        b.counts.cache_hits = 40;
        b.cpu.edge_no = CpuFigure { count: 1100, total_ms: 35.0, set_aside: 3 };
        b.wasm_bytes = 3 << 20;
        let f = IsolateFigures::between(&a, &b, 100);
        assert_eq!((f.cache_reads_per_lookup, f.cache_hits_per_lookup), (0.5, 0.4));
        assert_eq!(f.cpu_us.get("edge_no"), Some(&30.0), "30 ms over 1,000 answers");
        assert_eq!(f.cpu_us.get("forwarded"), None, "none ran");
        assert_eq!(f.wasm_mib, 3.0);
    }
}
