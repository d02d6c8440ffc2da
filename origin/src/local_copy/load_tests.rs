//! Loads of copies stop as soon as they are superseded: a filter whose generation flaps never
//! has several full-filter loads running at once.

use super::tests::hash;
use super::tests::{generation_of, held, store_with_generation, FILTER};
use super::LocalCopies;
use crate::metrics::Metrics;
use crate::store::embedded::MemoryFilterStore;
use crate::store::{CopySource, Generation, StoreResult};
use std::sync::Arc;
use std::time::Duration;

/// A copy source whose segment reads wait until let through: a load that hangs midway.
struct HeldSegments {
    inner: Arc<MemoryFilterStore>,
    open: tokio::sync::Semaphore,
    reads_waiting: std::sync::atomic::AtomicUsize,
}

#[async_trait::async_trait]
impl CopySource for HeldSegments {
    async fn journal_head(&self, filter: &str, meta: Generation) -> StoreResult<bloomgate_filter::JournalPosition> {
        self.inner.journal_head(filter, meta).await
    }
    async fn segment(&self, filter: &str, meta: Generation, index: u32) -> StoreResult<crate::store::SegmentBits> {
        self.reads_waiting.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let _through = self.open.acquire().await.expect("never closed");
        self.inner.segment(filter, meta, index).await
    }
    async fn catch_up_journal(
        &self,
        filter: &str,
        meta: Generation,
        page: crate::store::JournalPage,
    ) -> StoreResult<crate::store::JournalRead> {
        self.inner.catch_up_journal(filter, meta, page).await
    }
}

fn loads(metrics: &Metrics, result: &str) -> u64 {
    let line = format!("bloomgate_local_copy_loads_total{{result=\"{result}\"}} ");
    metrics.render().lines().find_map(|l| l.strip_prefix(line.as_str())?.parse().ok()).unwrap_or(0)
}

#[tokio::test]
async fn a_load_superseded_by_a_newer_generation_stops_at_once() {
    let (store, first) = store_with_generation(1).await;
    let source = Arc::new(HeldSegments {
        inner: store.clone(),
        open: tokio::sync::Semaphore::new(0),
        reads_waiting: Default::default(),
    });
    let metrics = Arc::new(Metrics::default());
    let copies = LocalCopies::new(source.clone(), 1 << 20, metrics.clone());
    assert!(copies.may_contain(FILTER, first, &hash(first, "a")).await.is_none(), "the first lookup starts a load");
    let waiting = || source.reads_waiting.load(std::sync::atomic::Ordering::SeqCst);
    for _ in 0..500 {
        if waiting() > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    assert!(waiting() > 0, "the first generation's load is reading segments");

    // A rebuild named a newer generation while the load hangs: its load replaces the first.
    let second = generation_of(&store, 2).await;
    assert!(copies.may_contain(FILTER, second, &hash(second, "a")).await.is_none());
    for _ in 0..500 {
        if loads(&metrics, "cancelled") > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    assert_eq!(loads(&metrics, "cancelled"), 1, "the superseded load still runs, holding its bits");

    source.open.add_permits(1 << 20);
    held(&copies, second).await;
    assert_eq!(loads(&metrics, "loaded"), 1, "only the newer generation was loaded");
    assert_eq!(copies.held_bytes(), second.params.total_bytes());
}
