//! The shared feed at the origin, against real Redis and Cassandra: every write acknowledged is
//! in the sealed chunks of its time, exactly once, as the journal has it; a sealed chunk reads
//! the same every time and is served immutable under its path token, and only under it; a
//! segment at an epoch holds every write of the chunks up to it; a chunk not yet sealed, one
//! across a step back of Redis's clock and one whose entries were trimmed are each refused with
//! what the edge should do instead, never stored by a cache.
//!
//! # Running
//! `scripts/services start`, then `cargo test -p bloomgate-tests --test sealed_chunks`.

use bloomgate_client::api::CreateFilter;
use bloomgate_client::feed_token::{feed_token, CURRENT_GENERATION};
use bloomgate_client::{caching, media, paths};
use bloomgate_filter::feed_current::{slot_of, FeedCurrent, CURRENT_SLOT_MS};
use bloomgate_filter::sealed_chunk::ChunkClock;
use bloomgate_filter::sealed_page::decode_page;
use bloomgate_filter::{decode_segment, KeyHash};
use bloomgate_origin::store::{Generation, JournalPage, JournalRead};
use bloomgate_tests::origin::{TestOrigin, EDGE_SECRET};
use bloomgate_tests::{random_keys, redis_connection, redis_now_ms, unique_filter};
use reqwest::{header, Response, StatusCode};
use std::time::{Duration, Instant};

const WIDTH_MS: u64 = 250;

/// Writes are paced: the test sends the same on a fast machine and a slow one.
const WRITE_EVERY: Duration = Duration::from_millis(30);

async fn created(origin: &TestOrigin, name: &str) -> (String, Generation) {
    let filter = unique_filter(name);
    let create = CreateFilter { segment_bytes: 4096, ..CreateFilter::new(50_000, 0.01) };
    origin.client.create_filter(&filter, &create).await.unwrap_or_else(|e| panic!("create {filter}: {e}"));
    let meta = origin.state.gate.filter_store().state(&filter).await.unwrap().readable().unwrap();
    (filter, meta)
}

async fn get(origin: &TestOrigin, path: &str) -> Response {
    reqwest::Client::new().get(format!("{}{path}", origin.base)).send().await.unwrap()
}

fn page_path(filter: &str, meta: Generation, chunk: u64, page: u32) -> String {
    let token = feed_token(EDGE_SECRET.as_bytes(), filter, meta.generation);
    paths::sealed_page(&token, filter, meta.generation, WIDTH_MS, chunk, page)
}

/// Every hash of chunk `chunk`, all pages, waiting (a bounded while) for it to be sealed.
async fn chunk_hashes(origin: &TestOrigin, filter: &str, meta: Generation, chunk: u64) -> Vec<KeyHash> {
    let deadline = Instant::now() + Duration::from_secs(10);
    let (mut hashes, mut page, mut pages) = (Vec::new(), 0, 1);
    while page < pages {
        let response = get(origin, &page_path(filter, meta, chunk, page)).await;
        if response.status() == StatusCode::TOO_EARLY && Instant::now() < deadline {
            assert_eq!(response.headers()[header::CACHE_CONTROL], caching::EDGE_FEED);
            assert!(response.headers().contains_key(header::RETRY_AFTER));
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        }
        assert_eq!(response.status(), StatusCode::OK, "chunk {chunk}: {}", response.text().await.unwrap());
        assert_eq!(response.headers()[header::CACHE_CONTROL], caching::SHARED_FEED);
        assert_eq!(response.headers()[header::CONTENT_TYPE], media::SEALED_PAGE);
        let bytes = response.bytes().await.unwrap();
        let view = decode_page(&bytes).unwrap();
        assert_eq!((view.header.generation, view.header.chunk, view.header.page), (meta.generation, chunk, page));
        assert_eq!(view.header.seed, meta.params.seed);
        pages = view.header.pages;
        hashes.extend(view.hashes());
        page += 1;
    }
    hashes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_acknowledged_write_is_in_the_sealed_chunks_of_its_time_exactly_once() {
    let origin = TestOrigin::on_services(|_| {}).await;
    let mut redis = redis_connection().await;
    let (filter, meta) = created(&origin, "sealed").await;
    let store = origin.state.gate.filter_store().clone();
    let at_creation = store.journal_head(&filter, meta).await.unwrap();
    let clock = ChunkClock::new(WIDTH_MS).unwrap();

    let before = redis_now_ms(&mut redis).await;
    for key in random_keys(20) {
        assert_eq!(origin.put(&filter, &key).await.status(), StatusCode::CREATED);
        tokio::time::sleep(WRITE_EVERY).await;
    }
    let after = redis_now_ms(&mut redis).await;
    let mut sealed = Vec::new();
    for chunk in clock.chunk_of(before)..=clock.chunk_of(after) {
        sealed.extend(chunk_hashes(&origin, &filter, meta, chunk).await);
    }
    let JournalRead::Entries { entries, .. } =
        store.read_journal(&filter, meta, JournalPage { after: at_creation, max_entries: 1000 }).await.unwrap()
    else {
        panic!("the journal holds every entry since the filter was created")
    };
    let journal: Vec<KeyHash> = entries.into_iter().flatten().collect();
    assert_eq!(sealed.len(), 20, "one hash for each acknowledged write, no more");
    assert_eq!(sealed, journal, "the chunks hold what the journal holds, in its order");

    // Sealed: the same every time, and a write after the seal lands in a later chunk.
    let last = clock.chunk_of(after);
    let sealed_last = chunk_hashes(&origin, &filter, meta, last).await;
    assert_eq!(origin.put(&filter, &random_keys(1)[0]).await.status(), StatusCode::CREATED);
    assert_eq!(chunk_hashes(&origin, &filter, meta, last).await, sealed_last, "a sealed chunk changed");
    let chunk = clock.chunk_of(before);

    // Only under the generation's token; not past its pages; not a chunk still open.
    let path = page_path(&filter, meta, chunk, 0);
    let token = feed_token(EDGE_SECRET.as_bytes(), &filter, meta.generation);
    for wrong in [
        path.replace(&token, &feed_token(b"another secret", &filter, meta.generation)),
        path.replace(&token, &feed_token(EDGE_SECRET.as_bytes(), &filter, meta.generation + 1)),
        path.replace(&token, "00"),
    ] {
        assert_eq!(get(&origin, &wrong).await.status(), StatusCode::NOT_FOUND, "{wrong}");
    }
    assert_eq!(get(&origin, &page_path(&filter, meta, chunk, 1)).await.status(), StatusCode::NOT_FOUND);
    let later = clock.chunk_of(redis_now_ms(&mut redis).await + 30_000);
    let open = get(&origin, &page_path(&filter, meta, later, 0)).await;
    assert_eq!(open.status(), StatusCode::TOO_EARLY, "a chunk whose end Redis's clock has not reached");
    assert_eq!(open.headers()[header::CACHE_CONTROL], caching::EDGE_FEED);
    let bad_width = paths::sealed_page(&token, &filter, meta.generation, 50, chunk, 0);
    assert_eq!(get(&origin, &bad_width).await.status(), StatusCode::BAD_REQUEST);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunk_across_a_clock_step_or_with_entries_trimmed_is_refused() {
    let origin = TestOrigin::on_services(|_| {}).await;
    let mut redis = redis_connection().await;
    let clock = ChunkClock::new(WIDTH_MS).unwrap();

    // Redis's clock "steps back" ten minutes behind the journal: an add after it is given an
    // id ahead of the clock, and a chunk whose end lies in between proves nothing.
    let (filter, meta) = created(&origin, "sealed-step").await;
    let now = redis_now_ms(&mut redis).await;
    let journal = format!("bg:{{{filter}}}:jnl:{}", meta.generation);
    let _: String = redis::cmd("XADD")
        .arg(&journal)
        .arg(format!("{}-0", now + 600_000))
        .arg("h")
        .arg("")
        .query_async(&mut redis)
        .await
        .unwrap();
    assert_eq!(origin.put(&filter, &random_keys(1)[0]).await.status(), StatusCode::CREATED);
    let across = get(&origin, &page_path(&filter, meta, clock.chunk_of(now + 1_000), 0)).await;
    assert_eq!(across.status(), StatusCode::CONFLICT);
    assert_eq!(across.headers()[header::CACHE_CONTROL], caching::EDGE_FEED);

    // A step record of a format this release does not know is never guessed at: no chunk is
    // sealed under it.
    let (filter, meta) = created(&origin, "sealed-step-format").await;
    let steps = format!("bg:{{{filter}}}:jstep:{}", meta.generation);
    let () = redis::cmd("HSET")
        .arg(&steps)
        .arg("format")
        .arg(2)
        .arg("spans")
        .arg("[]")
        .query_async(&mut redis)
        .await
        .unwrap();
    let written_at = redis_now_ms(&mut redis).await;
    assert_eq!(origin.put(&filter, &random_keys(1)[0]).await.status(), StatusCode::CREATED);
    tokio::time::sleep(Duration::from_millis(2 * WIDTH_MS)).await;
    let unknown = get(&origin, &page_path(&filter, meta, clock.chunk_of(written_at), 0)).await;
    assert_eq!(unknown.status(), StatusCode::CONFLICT, "a chunk sealed under a step record it cannot read");

    // A chunk whose entries the journal trimmed is gone, not served short.
    let (filter, meta) = created(&origin, "sealed-trim").await;
    let written_at = redis_now_ms(&mut redis).await;
    assert_eq!(origin.put(&filter, &random_keys(1)[0]).await.status(), StatusCode::CREATED);
    let chunk = clock.chunk_of(written_at);
    assert_eq!(chunk_hashes(&origin, &filter, meta, chunk).await.len(), 1);
    let journal = format!("bg:{{{filter}}}:jnl:{}", meta.generation);
    let () = redis::cmd("XTRIM").arg(&journal).arg("MAXLEN").arg(0).query_async(&mut redis).await.unwrap();
    let gone = get(&origin, &page_path(&filter, meta, chunk, 0)).await;
    assert_eq!(gone.status(), StatusCode::GONE);
    assert_eq!(gone.headers()[header::CACHE_CONTROL], caching::EDGE_FEED);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_segment_at_an_epoch_holds_every_write_of_the_chunks_up_to_it() {
    let origin = TestOrigin::on_services(|_| {}).await;
    let mut redis = redis_connection().await;
    let (filter, meta) = created(&origin, "sealed-epoch").await;
    let clock = ChunkClock::new(WIDTH_MS).unwrap();
    let token = feed_token(EDGE_SECRET.as_bytes(), &filter, meta.generation);

    let before = redis_now_ms(&mut redis).await;
    for key in random_keys(10) {
        assert_eq!(origin.put(&filter, &key).await.status(), StatusCode::CREATED);
        tokio::time::sleep(WRITE_EVERY).await;
    }
    let epoch = clock.chunk_of(redis_now_ms(&mut redis).await);
    let mut written = Vec::new();
    for chunk in clock.chunk_of(before)..=epoch {
        written.extend(chunk_hashes(&origin, &filter, meta, chunk).await);
    }
    assert_eq!(written.len(), 10);

    let mut segments = Vec::new();
    for index in 0..meta.params.segment_count {
        let path = paths::epoch_segment(&token, &filter, meta.generation, WIDTH_MS, epoch, index);
        let response = get(&origin, &path).await;
        assert_eq!(response.status(), StatusCode::OK, "{path}");
        assert_eq!(response.headers()[header::CACHE_CONTROL], caching::SHARED_FEED);
        assert_eq!(response.headers()[header::CONTENT_TYPE], media::SEGMENT);
        segments.push(response.bytes().await.unwrap().to_vec());
    }
    for hash in &written {
        let answers: Vec<bool> =
            segments.iter().filter_map(|bytes| decode_segment(bytes).unwrap().may_contain_hash(hash).ok()).collect();
        assert_eq!(answers, vec![true], "a write of a chunk up to the epoch is missing from its segment");
    }

    let past_the_end =
        paths::epoch_segment(&token, &filter, meta.generation, WIDTH_MS, epoch, meta.params.segment_count);
    assert_eq!(get(&origin, &past_the_end).await.status(), StatusCode::NOT_FOUND);
    let later = clock.chunk_of(redis_now_ms(&mut redis).await + 30_000);
    let open = get(&origin, &paths::epoch_segment(&token, &filter, meta.generation, WIDTH_MS, later, 0)).await;
    assert_eq!(open.status(), StatusCode::TOO_EARLY, "an epoch Redis's clock has not reached");
    let wrong = paths::epoch_segment("00", &filter, meta.generation, WIDTH_MS, epoch, 0);
    assert_eq!(get(&origin, &wrong).await.status(), StatusCode::NOT_FOUND);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_current_document_names_the_readable_generation_and_a_sealed_epoch() {
    let origin = TestOrigin::on_services(|_| {}).await;
    let mut redis = redis_connection().await;
    let (filter, meta) = created(&origin, "sealed-current").await;
    let clock = ChunkClock::new(WIDTH_MS).unwrap();
    let token = feed_token(EDGE_SECRET.as_bytes(), &filter, CURRENT_GENERATION);
    assert_eq!(origin.put(&filter, &random_keys(1)[0]).await.status(), StatusCode::CREATED);
    tokio::time::sleep(Duration::from_millis(4 * WIDTH_MS)).await;

    // Not at a slot's very start, where the epoch is bounded by the clock rather than the slot.
    let mut now = redis_now_ms(&mut redis).await;
    if now % CURRENT_SLOT_MS < 4 * WIDTH_MS {
        tokio::time::sleep(Duration::from_millis(4 * WIDTH_MS)).await;
        now = redis_now_ms(&mut redis).await;
    }
    let response = get(&origin, &paths::feed_current(&token, &filter, WIDTH_MS, slot_of(now))).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.headers()[header::CACHE_CONTROL], caching::FEED_CURRENT);
    let current: FeedCurrent = response.json().await.unwrap();
    current.check_format().unwrap();
    assert_eq!((current.generation, current.params, current.width_ms), (meta.generation, meta.params, WIDTH_MS));
    let slot_start = slot_of(now) * CURRENT_SLOT_MS;
    assert!(current.epoch < clock.chunk_of(slot_start), "the epoch ends by the slot's start: {current:?}");
    assert!(clock.end_ms(current.epoch) <= current.read_at_ms, "the epoch is sealed: {current:?}");
    let again: FeedCurrent =
        get(&origin, &paths::feed_current(&token, &filter, WIDTH_MS, slot_of(now))).await.json().await.unwrap();
    assert_eq!(again.epoch, current.epoch, "one epoch for every document of a slot");
    let generation_token = feed_token(EDGE_SECRET.as_bytes(), &filter, meta.generation);
    let at_epoch = paths::epoch_segment(&generation_token, &filter, meta.generation, WIDTH_MS, current.epoch, 0);
    assert_eq!(get(&origin, &at_epoch).await.status(), StatusCode::OK);

    // A slot still to come would be kept by a cache past its purpose; a generation's token is
    // not the filter's.
    let early = get(&origin, &paths::feed_current(&token, &filter, WIDTH_MS, slot_of(now) + 5)).await;
    assert_eq!(early.status(), StatusCode::BAD_REQUEST);
    let wrong = paths::feed_current(&generation_token, &filter, WIDTH_MS, slot_of(now));
    assert_eq!(get(&origin, &wrong).await.status(), StatusCode::NOT_FOUND);
}
