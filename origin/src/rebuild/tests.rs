//! A rebuild within a memory budget smaller than the filter, in process: built in runs of
//! segments, one scan each, it holds no more than the budget and sets exactly the bits a
//! rebuild holding the whole filter sets.

use super::{rebuild, RebuildOptions};
use crate::config::Config;
use crate::gate::{in_process_gate, CreateFilter};
use crate::store::embedded::MemoryFilterStore;
use crate::store::{CopySource, Generation, LifecycleStore, StateStore};
use bloomgate_filter::{BloomFilter, KeyFormat};

/// Every segment of `meta` as the filter store holds it.
async fn payloads(filters: &MemoryFilterStore, meta: Generation) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for index in 0..meta.params.segment_count {
        out.push(filters.segment("f", meta, index).await.unwrap().payload);
    }
    out
}

/// Every segment of `meta` as one build of `keys` holding the whole filter sets it.
fn whole_build(meta: Generation, keys: &[String]) -> Vec<Vec<u8>> {
    let whole = BloomFilter::new(meta.params);
    for key in keys {
        whole.insert_shared(key.as_bytes());
    }
    (0..meta.params.segment_count).map(|i| whole.segment_payload(i)).collect()
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

        assert!(
            payloads(&filters, meta).await == whole_build(meta, &written),
            "budget {budget}: the bits differ from a whole build"
        );
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn runs_posted_by_a_rebuild_are_built_by_helpers_and_a_dead_helpers_run_by_the_rebuild() {
    let config = Config { rebuild_grace_ms: 0, rebuild_settle_ms: 0, ..Config::default() };
    let (gate, filters, keys, dir) = in_process_gate(&config);
    let create = CreateFilter { key_format: KeyFormat::Bytes, segment_bytes: 1024, ..CreateFilter::new(20_000, 0.01) };
    gate.create_filter("f", create).await.unwrap();
    let written: Vec<String> = (0..3_000).map(|i| format!("key-{i}")).collect();
    assert_eq!(gate.insert_batch("f", &written).await.unwrap(), written.len());

    // Two segments a run; the rebuild stops once its runs are posted.
    let options = RebuildOptions {
        memory_bytes: 2 * 1024,
        lease_ttl: std::time::Duration::from_millis(600),
        ..RebuildOptions::from_config(&config, false)
    };
    filters.pauses.after_post_runs.arm();
    let rebuilding = super::start(filters.clone(), keys.clone(), "f".into(), options.clone()).await.unwrap();
    filters.pauses.after_post_runs.reached.notified().await;

    // Three helpers build a run each; a fourth claims one and dies with it.
    let new = filters.state("f").await.unwrap().building.expect("the new generation is named");
    let mut helped = Vec::new();
    for _ in 0..3 {
        let run = super::help(filters.as_ref(), keys.as_ref(), "f", &options).await.unwrap().expect("a run to build");
        assert_eq!((run.generation, run.keys), (new.generation, written.len() as u64));
        helped.push(run.index);
    }
    assert_eq!(helped, vec![0, 1, 2], "each helper claims the first run nobody holds");
    assert!(filters.claim_run("f", new.generation, 3, "a helper that dies", options.lease_ttl).await.unwrap());
    let small = RebuildOptions { memory_bytes: 1024, ..options.clone() };
    assert!(
        super::help(filters.as_ref(), keys.as_ref(), "f", &small).await.unwrap().is_none(),
        "a helper whose memory cannot hold a run declines"
    );

    filters.pauses.after_post_runs.go.notify_one();
    let report = rebuilding.await.unwrap().unwrap();
    let meta = filters.state("f").await.unwrap().readable().expect("the rebuilt generation is active");
    assert_eq!(meta.generation, new.generation);
    assert_eq!(report.scans, (meta.params.segment_count as usize).div_ceil(2));
    assert_eq!(report.scans_elsewhere, 3, "the dead helper's run was built by the rebuild once its claim expired");
    assert_eq!(report.keys, written.len() as u64);
    assert!(filters.run_board("f", new.generation).await.unwrap().is_none(), "the board is taken down");

    assert!(payloads(&filters, meta).await == whole_build(meta, &written), "the bits differ from a whole build");
    let _ = std::fs::remove_dir_all(dir);
}
