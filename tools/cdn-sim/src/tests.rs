//! The caches against a counting upstream, on tokio's paused clock.

use super::*;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Answers every path with its own name in the body, after a pause, counting the fetches; the
/// `Cache-Control` by the path's first segment.
#[derive(Default)]
struct Origin {
    fetches: AtomicU64,
}

#[async_trait]
impl Upstream for Origin {
    async fn fetch(&self, path: &str) -> Arc<Fetched> {
        self.fetches.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(10)).await;
        let (status, control) = match path.split('/').nth(1) {
            Some("immutable") => (200, "public, max-age=31536000, immutable"),
            Some("short") => (200, "public, max-age=10"),
            Some("early") => (425, "no-store"),
            _ => (200, "no-store"),
        };
        Arc::new(Fetched {
            status,
            cache_control: Some(control.into()),
            retry_after: None,
            body: path.as_bytes().to_vec(),
        })
    }
}

fn caches(pops: usize, upper: bool, policy: Policy) -> (Cdn, Arc<Origin>) {
    let origin = Arc::new(Origin::default());
    (Cdn::new(pops, upper, origin.clone(), policy), origin)
}

#[tokio::test(start_paused = true)]
async fn immutable_answers_are_kept_no_store_ones_never() {
    let (cdn, origin) = caches(1, false, Policy::default());
    for _ in 0..3 {
        assert_eq!(cdn.get(0, "/immutable/a").await.body, b"/immutable/a");
        cdn.get(0, "/fresh/b").await;
    }
    assert_eq!(origin.fetches.load(Ordering::SeqCst), 1 + 3);
    let c = cdn.counts();
    assert_eq!((c.lower.requests, c.lower.hits, c.lower.stored, c.upstream), (6, 2, 1, 4));
    assert_eq!(c.upstream_bytes, "/immutable/a".len() as u64 + 3 * "/fresh/b".len() as u64);
}

#[tokio::test(start_paused = true)]
async fn a_max_age_expires_unless_the_cache_is_hostile() {
    let (cdn, origin) = caches(1, false, Policy::default());
    cdn.get(0, "/short/a").await;
    tokio::time::advance(Duration::from_secs(9)).await;
    cdn.get(0, "/short/a").await;
    assert_eq!(origin.fetches.load(Ordering::SeqCst), 1, "within max-age");
    tokio::time::advance(Duration::from_secs(2)).await;
    cdn.get(0, "/short/a").await;
    assert_eq!(origin.fetches.load(Ordering::SeqCst), 2, "past it");

    let (hostile, origin) = caches(1, false, Policy { hostile: Hostile::ServeExpired, ..Policy::default() });
    hostile.get(0, "/short/a").await;
    tokio::time::advance(Duration::from_secs(3_600)).await;
    hostile.get(0, "/short/a").await;
    assert_eq!(origin.fetches.load(Ordering::SeqCst), 1, "an hour past its max-age, still served");
}

#[tokio::test(start_paused = true)]
async fn concurrent_misses_of_one_path_make_one_fetch() {
    let (cdn, origin) = caches(1, false, Policy::default());
    let cdn = Arc::new(cdn);
    let asks: Vec<_> = (0..50)
        .map(|_| {
            let cdn = cdn.clone();
            tokio::spawn(async move { cdn.get(0, "/fresh/a").await })
        })
        .collect();
    for ask in asks {
        assert_eq!(ask.await.unwrap().body, b"/fresh/a");
    }
    assert_eq!(origin.fetches.load(Ordering::SeqCst), 1, "no-store, but one flight");
    assert_eq!(cdn.counts().lower.collapsed, 49);
    cdn.get(0, "/fresh/a").await;
    assert_eq!(origin.fetches.load(Ordering::SeqCst), 2, "a flight that landed is not reused");
}

#[tokio::test(start_paused = true)]
async fn an_upper_tier_makes_the_upstream_requests_flat_in_pops() {
    for (upper, expected) in [(false, 10), (true, 1)] {
        let (cdn, origin) = caches(10, upper, Policy::default());
        for pop in 0..10 {
            cdn.get(pop, "/immutable/a").await;
        }
        assert_eq!(origin.fetches.load(Ordering::SeqCst), expected, "upper tier {upper}");
        assert_eq!(cdn.counts().lower.misses, 10);
    }
}

#[tokio::test(start_paused = true)]
async fn a_ttl_by_status_overrides_the_headers() {
    let policy = Policy {
        ttl_by_status: BTreeMap::from([(200, Duration::from_secs(60)), (425, Duration::ZERO)]),
        ..Policy::default()
    };
    let (cdn, origin) = caches(1, false, policy);
    cdn.get(0, "/fresh/a").await;
    cdn.get(0, "/fresh/a").await;
    cdn.get(0, "/early/b").await;
    cdn.get(0, "/early/b").await;
    assert_eq!(origin.fetches.load(Ordering::SeqCst), 1 + 2, "a no-store 200 kept; a 425 never");
}

#[tokio::test(start_paused = true)]
async fn a_hostile_cache_answers_with_another_keys_answer() {
    let (cdn, _) = caches(1, false, Policy { hostile: Hostile::ServeOtherKey { every: 2 }, ..Policy::default() });
    cdn.get(0, "/immutable/a").await;
    cdn.get(0, "/immutable/b").await;
    let answers: Vec<Vec<u8>> = futures_answers(&cdn, "/immutable/a", 4).await;
    assert!(answers.iter().any(|a| a == b"/immutable/b"), "another key's answer among {answers:?}");
    assert!(cdn.counts().lower.other_key >= 1);
}

async fn futures_answers(cdn: &Cdn, path: &str, n: usize) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(cdn.get(0, path).await.body.clone());
    }
    out
}
