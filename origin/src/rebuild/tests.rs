//! A rebuild within a memory budget smaller than the filter, in process: built in runs of
//! segments, one scan each, it holds no more than the budget and sets exactly the bits a
//! rebuild holding the whole filter sets.

use super::{rebuild, RebuildOptions};
use crate::config::Config;
use crate::gate::{in_process_gate, CreateFilter};
use crate::store::embedded::MemoryFilterStore;
use crate::store::{CopySource, Generation, StateStore};
use bloomgate_filter::{BloomFilter, KeyFormat};

/// Every segment of `meta` as the filter store holds it.
async fn payloads(filters: &MemoryFilterStore, meta: Generation) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for index in 0..meta.params.segment_count {
        out.push(filters.segment("f", meta, index).await.unwrap().payload);
    }
    out
}

#[tokio::test]
async fn a_rebuild_over_its_memory_budget_scans_once_per_run_and_sets_the_same_bits() {
    let config = Config { rebuild_grace_ms: 0, ..Config::default() };
    let (gate, filters, keys, dir) = in_process_gate(&config);
    let create = CreateFilter { key_format: KeyFormat::Bytes, segment_bytes: 1024, ..CreateFilter::new(20_000, 0.01) };
    gate.create_filter("f", create).await.unwrap();
    let written: Vec<String> = (0..3_000).map(|i| format!("key-{i}")).collect();
    assert_eq!(gate.insert_batch("f", &written).await.unwrap(), written.len());

    for budget in [u64::MAX, 3 * 1024, 1] {
        let options = RebuildOptions { memory_bytes: budget, ..RebuildOptions::from_config(&config, false) };
        let report = rebuild(filters.clone(), keys.clone(), "f", options).await.unwrap();
        let meta = filters.state("f").await.unwrap().readable().expect("the rebuilt generation is active");
        assert_eq!(meta.generation, report.generation);
        let segments = meta.params.segment_count as usize;
        assert!(segments > 10, "the filter must span many segments: {segments}");
        let (scans, held) = match budget {
            u64::MAX => (1, meta.params.total_bytes()),
            1 => (segments, 1024),
            _ => (segments.div_ceil(3), 3 * 1024),
        };
        assert_eq!((report.scans, report.held_bytes), (scans, held), "budget {budget}");
        assert_eq!(report.keys, written.len() as u64);

        let whole = BloomFilter::new(meta.params);
        for key in &written {
            whole.insert_shared(key.as_bytes());
        }
        let expected: Vec<Vec<u8>> = (0..meta.params.segment_count).map(|i| whole.segment_payload(i)).collect();
        assert!(payloads(&filters, meta).await == expected, "budget {budget}: the bits differ from a whole build");
    }
    let _ = std::fs::remove_dir_all(dir);
}
