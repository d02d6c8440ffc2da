//! Dropping a filter and creating it again, with two origins on the real Redis and Cassandra
//! and metadata caches that outlive the whole exchange: no origin answers "not seen" from the
//! dropped filter's bits or caches for a key the new filter was told about, generations of the
//! new filter come after the dropped one's, and writes racing the drop are acknowledged only
//! when their key survives it (all of them when the drop keeps the keys; with `keys=delete`,
//! none acknowledged after the filter was created again is lost).
//!
//! # Running
//! `scripts/services start` (Redis on 6399, Cassandra on 9042), then
//! `cargo test -p bloomgate-tests --test filter_drop -- --test-threads 1`. `scripts/test` does
//! both. Each test owns its filter (random name).

use bloomgate_client::api::{CreateFilter, DropKeys};
use bloomgate_client::Client;
use bloomgate_tests::fault_proxy::ChaosProxy;
use bloomgate_tests::origin::{config, TestOrigin};
use bloomgate_tests::{cassandra_addr, random_keys, redis_addr, unique_filter};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Metadata and definitions cached this long: longer than a drop and a creation take, so the
/// second origin answers across them from what it cached before.
const META_CACHE_MS: u64 = 5_000;

async fn two_origins() -> (TestOrigin, TestOrigin) {
    let tune = |c: &mut bloomgate_origin::config::Config| c.meta_cache_ms = META_CACHE_MS;
    (TestOrigin::on_services(tune).await, TestOrigin::on_services(tune).await)
}

/// The generation answering lookups, waiting up to 30 s for one (a filter created over kept
/// keys has none until its first build).
async fn generation(origin: &TestOrigin, filter: &str) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(generation) = origin.client.stats(filter).await.ok().and_then(|s| s.generation) {
            return generation;
        }
        assert!(Instant::now() < deadline, "{filter}: no readable generation within 30 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Stores `keys`, asking again while the filter has no generation to add to yet (503), and
/// while the origin does not know it yet (404: an origin learns of a filter created through
/// another within `meta_cache_ms`, the life of its list of filter names).
async fn insert_retrying(client: &Client, filter: &str, keys: &[String]) {
    let deadline = Instant::now() + Duration::from_millis(META_CACHE_MS) + Duration::from_secs(30);
    loop {
        match client.insert_batch(filter, keys).await {
            Ok(stored) => return assert_eq!(stored.stored, keys.len()),
            Err(e) if (e.is_retryable() || e.status() == Some(404)) && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await
            }
            Err(e) => panic!("insert into {filter}: {e}"),
        }
    }
}

/// The keys of `keys` some origin answers "not seen", with who said so.
async fn not_seen(origins: &[&TestOrigin], filter: &str, keys: &[String]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for origin in origins {
        for (key, (seen, by)) in keys.iter().zip(origin.lookup_all(filter, keys).await) {
            if !seen {
                out.push((key.clone(), format!("{} via {}", by, origin.base)));
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_filter_dropped_and_created_again_never_answers_no_from_the_old_one() {
    let (a, b) = two_origins().await;
    let filter = unique_filter("dropped");
    let create = CreateFilter::new(20_000, 0.01);
    a.client.create_filter(&filter, &create).await.unwrap();
    let kept = random_keys(500);
    a.insert_all(&filter, &kept).await;
    // B caches the definition and the generation, and answers absent keys from the filter.
    let absent = random_keys(200);
    let answers = b.lookup_all(&filter, &absent).await;
    assert!(answers.iter().filter(|(_, by)| by == "filter").count() > 150, "B's filter is not warm: {answers:?}");
    assert!(not_seen(&[&b], &filter, &kept).await.is_empty());
    let first = generation(&a, &filter).await;

    // Dropped keeping its keys, and created again at once, well within B's caches.
    let dropped = a.client.drop_filter(&filter, DropKeys::Keep).await.unwrap();
    assert_eq!((dropped.dropped, dropped.keys, dropped.keys_deleted), (true, DropKeys::Keep, None));
    let gone = a.client.lookup(&filter, &kept[0]).await.expect_err("a dropped filter has no keys to answer for");
    assert_eq!(gone.status(), Some(404), "no such filter, not 'not seen': {gone}");
    a.client.create_filter(&filter, &create).await.unwrap();
    let fresh = random_keys(300);
    insert_retrying(&a.client, &filter, &fresh).await;
    // Straight away, B (caches from before the drop) and A: every key seen, kept or new.
    let all: Vec<String> = kept.iter().chain(&fresh).cloned().collect();
    assert_eq!(not_seen(&[&b, &a], &filter, &all).await, Vec::<(String, String)>::new());
    let second = generation(&a, &filter).await;
    assert!(second > first, "generation {second} after {first}: a segment identity would name two bit sets");
    assert_eq!(not_seen(&[&b, &a], &filter, &all).await, Vec::<(String, String)>::new(), "after the first build");

    // Dropped again deleting the keys (through B), created again (through A): the old keys are
    // gone, and what is written now is seen through both.
    let dropped = b.client.drop_filter(&filter, DropKeys::Delete).await.unwrap();
    assert_eq!(dropped.keys_deleted, Some(all.len() as u64));
    a.client.create_filter(&filter, &create).await.unwrap();
    let third = generation(&a, &filter).await;
    assert!(third > second);
    let after = random_keys(100);
    insert_retrying(&b.client, &filter, &after).await;
    assert_eq!(not_seen(&[&a, &b], &filter, &after).await, Vec::<(String, String)>::new());
    let answers = a.lookup_all(&filter, &all).await;
    assert!(answers.iter().all(|(seen, _)| !seen), "keys deleted with the filter came back");
    let listed = a.client.list_filters().await.unwrap();
    let entry = listed.filters.iter().find(|f| f.name == filter).expect("the filter created again is listed");
    assert_eq!((entry.generation, entry.dropping), (Some(third), false));
}

/// The filter store loses a drop's tombstone (its state key deleted, as a flush or an eviction
/// would): the database's drop record still holds the name to its key format, through another
/// origin, and the filter created again numbers its generations after the dropped one's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drop_outlives_the_filter_store_losing_its_tombstone() {
    let (a, b) = two_origins().await;
    let filter = unique_filter("remembered");
    let bytes = CreateFilter { key_format: bloomgate_filter::KeyFormat::Bytes, ..CreateFilter::new(5_000, 0.01) };
    a.client.create_filter(&filter, &bytes).await.unwrap();
    let kept = random_keys(100);
    a.insert_all(&filter, &kept).await;
    let first = generation(&a, &filter).await;
    a.client.drop_filter(&filter, DropKeys::Keep).await.unwrap();

    let mut redis = redis::Client::open(format!("redis://{}/", redis_addr()))
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let state_key = format!("bg:{{{filter}}}:meta");
    let deleted: u64 = redis::cmd("DEL").arg(&state_key).query_async(&mut redis).await.unwrap();
    assert_eq!(deleted, 1, "the tombstone was not where the test looked: it would prove nothing");

    // The kept keys were written as bytes: read as hex:64 they would be other keys.
    let refused = b.client.create_filter(&filter, &CreateFilter::new(5_000, 0.01)).await.unwrap_err();
    assert_eq!(refused.status(), Some(409), "{refused}");
    assert!(refused.to_string().contains("was dropped with key_format bytes"), "{refused}");
    b.client.create_filter(&filter, &bytes).await.unwrap();
    let second = generation(&b, &filter).await;
    assert!(second > first, "generation {second} after {first}");
    assert_eq!(not_seen(&[&a, &b], &filter, &kept).await, Vec::<(String, String)>::new());
}

/// A writer's task: each key it wrote, with when the write was acknowledged (None: refused).
type Writer = tokio::task::JoinHandle<Vec<(String, Option<Instant>)>>;

/// Writers through B, each one key at a time, until `stop`: each key with when its write was
/// acknowledged (None: refused).
fn writers(b: &TestOrigin, filter: &str, stop: Arc<AtomicBool>) -> Vec<Writer> {
    (0..WRITERS)
        .map(|_| {
            let (client, filter, stop) = (b.client.clone(), filter.to_owned(), stop.clone());
            tokio::spawn(async move {
                let mut written = Vec::new();
                while !stop.load(Ordering::SeqCst) {
                    let key = random_keys(1).remove(0);
                    let acked = client.insert(&filter, &key, b"").await.ok().map(|_| Instant::now());
                    written.push((key, acked));
                }
                written
            })
        })
        .collect()
}

/// How much B's database round trips are slowed by while the writers run.
const SLOW_DATABASE: Duration = Duration::from_millis(100);

/// Writes in flight at once through B.
const WRITERS: usize = 8;

/// What the writers wrote, all of them.
async fn written(writers: Vec<Writer>) -> Vec<(String, Option<Instant>)> {
    let mut all = Vec::new();
    for writer in writers {
        all.extend(writer.await.unwrap());
    }
    all
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_racing_a_drop_are_acknowledged_only_if_their_key_survives() {
    // B's database round trips are slowed, so its writes spend long between their first state
    // read and their second, and many of them straddle the drop and the creation.
    let proxy = ChaosProxy::start(&cassandra_addr()).await;
    let tune = |c: &mut bloomgate_origin::config::Config| c.meta_cache_ms = META_CACHE_MS;
    let a = TestOrigin::on_services(tune).await;
    let mut config = config(Some(format!("redis://{}/", redis_addr())), &proxy.addr);
    tune(&mut config);
    let b = TestOrigin::start(config).await;
    proxy.slow(SLOW_DATABASE);
    let filter = unique_filter("race");
    let create = CreateFilter::new(20_000, 0.01);
    a.client.create_filter(&filter, &create).await.unwrap();

    // Keys kept: every key whose write was acknowledged, before, during or after the drop, is
    // seen by the filter created again.
    let stop = Arc::new(AtomicBool::new(false));
    let writing = writers(&b, &filter, stop.clone());
    tokio::time::sleep(Duration::from_millis(500)).await;
    a.client.drop_filter(&filter, DropKeys::Keep).await.unwrap();
    a.client.create_filter(&filter, &create).await.unwrap();
    generation(&a, &filter).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, Ordering::SeqCst);
    let all = written(writing).await;
    proxy.slow(Duration::ZERO); // the answers are checked at full speed
    let acked: Vec<String> = all.iter().filter(|(_, at)| at.is_some()).map(|(k, _)| k.clone()).collect();
    assert!(acked.len() > 5 && acked.len() < all.len(), "{} of {} acknowledged", acked.len(), all.len());
    assert_eq!(not_seen(&[&a, &b], &filter, &acked).await, Vec::<(String, String)>::new());

    // Keys deleted: none acknowledged after the filter was created again may be lost (a write
    // that read the old filter first and found the new one after must not be acknowledged).
    let stop = Arc::new(AtomicBool::new(false));
    proxy.slow(SLOW_DATABASE);
    let writing = writers(&b, &filter, stop.clone());
    tokio::time::sleep(Duration::from_millis(500)).await;
    let drop_started = Instant::now();
    a.client.drop_filter(&filter, DropKeys::Delete).await.unwrap();
    a.client.create_filter(&filter, &create).await.unwrap();
    let recreated = Instant::now();
    tokio::time::sleep(Duration::from_millis(800)).await;
    stop.store(true, Ordering::SeqCst);
    let all = written(writing).await;
    proxy.slow(Duration::ZERO);
    let acked_since = |from: Instant| -> Vec<String> {
        all.iter().filter(|(_, at)| at.is_some_and(|t| t > from)).map(|(k, _)| k.clone()).collect()
    };
    let after = acked_since(recreated);
    let before: Vec<String> =
        all.iter().filter(|(_, at)| at.is_some_and(|t| t < drop_started)).map(|(k, _)| k.clone()).collect();
    assert!(!after.is_empty() && !before.is_empty(), "{} before, {} after", before.len(), after.len());
    assert_eq!(not_seen(&[&a, &b], &filter, &after).await, Vec::<(String, String)>::new());
    let survived: Vec<String> = before
        .iter()
        .zip(a.lookup_all(&filter, &before).await)
        .filter(|(_, (seen, _))| *seen)
        .map(|(key, _)| key.clone())
        .collect();
    assert_eq!(survived, Vec::<String>::new(), "keys acknowledged before the drop survived keys=delete");
}

/// Keys a drop left in Redis (on the single Redis, or every master of the cluster) other than
/// the tombstone and the retirement markers, which expire on their own.
async fn leftovers(mut nodes: Vec<redis::aio::MultiplexedConnection>, filter: &str) -> Vec<String> {
    let mut out = Vec::new();
    for conn in &mut nodes {
        let keys: Vec<String> = redis::cmd("KEYS").arg(format!("bg:{{{filter}*")).query_async(conn).await.unwrap();
        for key in keys {
            let kind: String = redis::cmd("TYPE").arg(&key).query_async(conn).await.unwrap();
            let value: Option<String> = match kind.as_str() {
                "string" => {
                    let bytes: Option<Vec<u8>> = redis::cmd("GET").arg(&key).query_async(conn).await.unwrap();
                    bytes.map(|b| String::from_utf8_lossy(&b).into_owned())
                }
                _ => None,
            };
            let ttl: i64 = redis::cmd("PTTL").arg(&key).query_async(conn).await.unwrap();
            let tombstone =
                key == format!("bg:{{{filter}}}:meta") && value.as_deref().is_some_and(|v| v.contains("\"dropped\""));
            let marker = value.as_deref() == Some("retired") && ttl > 0;
            if !tombstone && !marker {
                let shown: Option<String> = value.map(|v| v.chars().take(80).collect());
                out.push(format!("{key} ({kind}, ttl {ttl} ms): {shown:?}"));
            }
        }
    }
    out
}

/// Gives the filter every kind of key a live filter has: bits, versions and journals of two
/// generations (a rebuild), delete counts, a rebuild's progress and lease.
async fn everything_a_filter_keeps(origin: &TestOrigin, filter: &str) {
    origin.client.create_filter(filter, &CreateFilter::new(5_000, 0.01)).await.unwrap();
    let keys = random_keys(100);
    origin.insert_all(filter, &keys).await;
    origin.client.delete(filter, &keys[0]).await.unwrap();
    let first = generation(origin, filter).await;
    origin.client.rebuild(filter, &Default::default()).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while generation(origin, filter).await == first {
        assert!(Instant::now() < deadline, "the rebuild did not switch within 30 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drop_leaves_only_its_tombstone_on_a_single_redis() {
    let origin = TestOrigin::on_services(|_| {}).await;
    let filter = unique_filter("clean");
    everything_a_filter_keeps(&origin, &filter).await;
    let conn = || async {
        redis::Client::open(format!("redis://{}/", redis_addr()))
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap()
    };
    assert!(
        !leftovers(vec![conn().await], &filter).await.is_empty(),
        "the filter left no key to find: the test would prove nothing"
    );
    origin.client.drop_filter(&filter, DropKeys::Delete).await.unwrap();
    assert_eq!(leftovers(vec![conn().await], &filter).await, Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drop_leaves_only_its_tombstone_on_a_redis_cluster() {
    let origin = TestOrigin::on_cluster(|_| {}).await;
    let filter = unique_filter("clean-cluster");
    everything_a_filter_keeps(&origin, &filter).await;
    let masters = || async {
        let mut conns = Vec::new();
        for node in bloomgate_tests::redis_cluster::list().unwrap().into_iter().filter(|n| n.role == "master") {
            conns.push(bloomgate_tests::redis_cluster::node(node.port).await);
        }
        conns
    };
    assert!(!leftovers(masters().await, &filter).await.is_empty(), "the filter left no key to find");
    origin.client.drop_filter(&filter, DropKeys::Delete).await.unwrap();
    assert_eq!(leftovers(masters().await, &filter).await, Vec::<String>::new());
    // Created again on the cluster: numbered after the dropped filter, and answering.
    origin.client.create_filter(&filter, &CreateFilter::new(5_000, 0.01)).await.unwrap();
    let key = random_keys(1);
    insert_retrying(&origin.client, &filter, &key).await;
    assert!(origin.client.lookup(&filter, &key[0]).await.unwrap().seen);
}
