//! Two gates sharing one filter store and one database, as two origins share Redis and
//! Cassandra: a key written through one is looked up at once through the other, whose local
//! copy was loaded before the write. In process, so the interleavings are the ones the read
//! barrier must handle without any timing slack.

use crate::gate::{AnsweredBy, CreateFilter, Gate, GateSettings};
use crate::store::embedded::{MemoryFilterStore, RedbDatabase};
use crate::store::JournalRetention;
use std::sync::Arc;
use std::time::Duration;

const FILTER: &str = "f";

fn origins(dir: &std::path::Path) -> (Arc<Gate>, Arc<Gate>) {
    let retention = JournalRetention { max_entries: 100_000, max_age: Duration::from_secs(600) };
    let filters = Arc::new(MemoryFilterStore::new(retention));
    let database = Arc::new(RedbDatabase::open(&dir.join("keys.redb")).unwrap());
    let settings = GateSettings {
        cache_ttl: Duration::from_secs(1),
        filter_enabled: true,
        max_filter_bytes: 1 << 30,
        journal_enabled: true,
        local_copy_max_bytes: 1 << 20,
        rebuild_lease: Duration::from_secs(30),
    };
    let gate = || Arc::new(Gate::new(filters.clone(), database.clone(), settings));
    (gate(), gate())
}

fn key(i: u64) -> String {
    format!("{:064x}", i)
}

#[tokio::test]
async fn a_key_written_through_one_origin_is_seen_at_once_through_the_others_local_copy() {
    let dir = std::env::temp_dir().join(format!("bloomgate-two-origins-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (a, b) = origins(&dir);
    let create = CreateFilter { segment_bytes: 4096, ..CreateFilter::new(100_000, 0.01) };
    a.create_filter(FILTER, create).await.unwrap();
    // B's copy is loaded before any of the writes below.
    for _ in 0..200 {
        b.lookup(FILTER, key(u64::MAX).as_bytes()).await.unwrap();
        if b.local_copy_bytes() > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(b.local_copy_bytes() > 0, "B holds a copy");
    let answered_before = b.metrics.render();

    // Four writers at once, each writing through A and reading back through B at once.
    let writers = (0..4u64).map(|w| {
        let (a, b) = (a.clone(), b.clone());
        tokio::spawn(async move {
            for i in 0..100 {
                let k = key(w * 1_000 + i);
                a.insert(FILTER, k.as_bytes(), b"v").await.unwrap();
                let answer = b.lookup(FILTER, k.as_bytes()).await.unwrap();
                assert!(answer.seen, "{k} acknowledged through A, answered 'not seen' through B");
            }
        })
    });
    for writer in writers {
        writer.await.unwrap();
    }
    let negatives = (0..500).map(|i| key(10_000_000 + i));
    let mut by_filter = 0;
    for k in negatives {
        let answer = b.lookup(FILTER, k.as_bytes()).await.unwrap();
        by_filter += u32::from(answer.answered_by == AnsweredBy::Filter);
    }
    assert!(by_filter > 450, "B's copy answers 'no' for keys never written ({by_filter} of 500)");
    let answered = |text: &str| {
        text.lines()
            .find(|l| l.starts_with("bloomgate_local_copy_lookups_total{outcome=\"answered\"}"))
            .and_then(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let through_copy = answered(&b.metrics.render()) - answered(&answered_before);
    assert!(through_copy >= 900, "the lookups went through B's copy ({through_copy} of 900)");
    let _ = std::fs::remove_dir_all(&dir);
}
