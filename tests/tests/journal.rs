//! The insert journal at the origin, against real Redis and Cassandra: a segment copy plus the
//! journal entries after its position holds exactly what a fresh copy holds; positions past the
//! journal's retention are refused (410), never answered from a gap; and with the journal off,
//! manifests and segments are as before.
//!
//! # Running
//! `scripts/services start`, then `cargo test -p bloomgate-tests --test journal`.
//! `BG_TEST_REDIS` and `BG_TEST_CASSANDRA` name the services.

use bloomgate_client::api::CreateFilter;
use bloomgate_filter::{decode_journal, decode_segment, hash_key, JournalPosition, Manifest};
use bloomgate_origin::store::{Generation, JournalPage, JournalRead};
use bloomgate_tests::origin::TestOrigin;
use bloomgate_tests::{random_keys, redis_connection, redis_now_ms, unique_filter};
use reqwest::StatusCode;

async fn manifest(origin: &TestOrigin, filter: &str) -> Manifest {
    let r = origin.edge_get(&format!("/v1/filters/{filter}/manifest")).await;
    assert_eq!(r.status(), StatusCode::OK);
    r.json().await.unwrap()
}

async fn segment(origin: &TestOrigin, filter: &str, generation: u64, index: u32) -> Vec<u8> {
    let r = origin.edge_get(&format!("/v1/filters/{filter}/segments/{generation}/{index}")).await;
    assert_eq!(r.status(), StatusCode::OK);
    r.bytes().await.unwrap().to_vec()
}

async fn create(origin: &TestOrigin, filter: &str) {
    let create = CreateFilter { segment_bytes: 4096, ..CreateFilter::new(50_000, 0.01) };
    origin.client.create_filter(filter, &create).await.unwrap_or_else(|e| panic!("create {filter}: {e}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_old_segment_copy_plus_the_journal_holds_what_a_fresh_copy_holds() {
    let origin = TestOrigin::on_services(|_| {}).await;
    let filter = unique_filter("journal");
    create(&origin, &filter).await;
    let before = random_keys(2_000);
    origin.insert_all(&filter, &before).await;
    let m0 = manifest(&origin, &filter).await;
    let head0 = m0.journal.expect("the manifest names the journal head");
    let count = m0.params.segment_count;
    assert!(count >= 8, "{count} segments");
    let mut old: Vec<Vec<u8>> = Vec::new();
    for i in 0..count {
        let bytes = segment(&origin, &filter, m0.generation, i).await;
        let at = decode_segment(&bytes).unwrap().header().journal.expect("segments name their journal position");
        assert!(at.added >= head0.added, "a segment read after the manifest is current to at least its head");
        old.push(bytes);
    }

    // More writes: single keys and batches, each one journal entry per generation.
    let after = random_keys(3_000);
    origin.insert_all(&filter, &after[..2_900]).await;
    for key in &after[2_900..] {
        assert_eq!(origin.put(&filter, key).await.status(), StatusCode::CREATED);
    }
    let m1 = manifest(&origin, &filter).await;
    let head1 = m1.journal.unwrap();
    assert_eq!(m1.generation, m0.generation);
    assert_eq!(
        head1.added,
        head0.added + 6 + 100,
        "one entry per add call: 6 batches of 500 (the last 400), 100 single PUTs"
    );

    let payloads = catch_up_through_the_journal(&origin, &filter, &m1, head1, &old).await;
    for i in 0..count {
        let fresh = segment(&origin, &filter, m1.generation, i).await;
        let fresh = decode_segment(&fresh).unwrap();
        assert_eq!(
            payloads[i as usize].0,
            fresh.payload(),
            "segment {i}: old copy + journal differs from a fresh copy"
        );
        assert!(payloads[i as usize].1 >= head1.added);
    }
    // And so every key is "maybe" in the caught-up copies.
    for key in before.iter().chain(&after) {
        let normalized = bloomgate_filter::KeyFormat::SHA256_HEX.normalize(key.as_bytes()).unwrap();
        let hash = hash_key(&normalized, m1.params.seed);
        let at = m1.params.locate(&hash);
        let view = bloomgate_filter::encode_segment(
            &m1.params,
            m1.generation,
            at.segment,
            0,
            &payloads[at.segment as usize].0,
        )
        .unwrap();
        assert_eq!(decode_segment(&view).unwrap().may_contain_hash(&hash), Ok(true), "key {key}");
    }
}

/// The old segment copies caught up to `head1` through the journal: one request from the oldest
/// copy's position, each chunk verified and applied to every copy. Returns each copy's payload
/// and the position it is current to.
async fn catch_up_through_the_journal(
    origin: &TestOrigin,
    filter: &str,
    m1: &Manifest,
    head1: JournalPosition,
    old: &[Vec<u8>],
) -> Vec<(Vec<u8>, u64)> {
    // One request from the oldest copy's position, follow-ups while the chunk stops short.
    let mut payloads: Vec<(Vec<u8>, u64)> = old
        .iter()
        .map(|b| {
            let v = decode_segment(b).unwrap();
            (v.payload().to_vec(), v.header().journal.unwrap().added)
        })
        .collect();
    let mut from: JournalPosition =
        old.iter().map(|b| decode_segment(b).unwrap().header().journal.unwrap()).min().unwrap();
    let mut chunks = 0;
    while from.added < head1.added {
        let r = origin
            .edge_get(&format!(
                "/v1/filters/{filter}/journal/{}?after={}&after_id={}",
                m1.generation,
                from.added,
                from.stream_id()
            ))
            .await;
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(r.headers()["content-type"], "application/vnd.bloomgate.journal");
        let bytes = r.bytes().await.unwrap();
        let chunk = decode_journal(&bytes).expect("a chunk that verifies");
        assert_eq!(chunk.from, from.added);
        for (i, (payload, at)) in payloads.iter_mut().enumerate() {
            *at = chunk.apply(m1.generation, &m1.params, i as u32, *at, payload).unwrap();
        }
        from = chunk.to;
        chunks += 1;
    }
    assert_eq!(chunks, 1, "106 entries fit one chunk");
    payloads
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_position_past_the_journals_retention_is_refused_never_answered_from_a_gap() {
    let origin = TestOrigin::on_services(|c| c.journal_max_entries = 50).await;
    let filter = unique_filter("retention");
    create(&origin, &filter).await;
    let start = manifest(&origin, &filter).await;
    let first = start.journal.unwrap();
    for key in random_keys(600) {
        assert_eq!(origin.put(&filter, &key).await.status(), StatusCode::CREATED);
    }
    let path = |at: JournalPosition| {
        format!("/v1/filters/{filter}/journal/{}?after={}&after_id={}", start.generation, at.added, at.stream_id())
    };
    let r = origin.edge_get(&path(first)).await;
    assert_eq!(r.status(), StatusCode::GONE, "600 entries into a journal that keeps about 50");
    // A position the journal never had is refused too, not answered with the wrong entries.
    let head = manifest(&origin, &filter).await.journal.unwrap();
    let made_up = JournalPosition { added: head.added - 3, ..head };
    assert_eq!(origin.edge_get(&path(made_up)).await.status(), StatusCode::GONE);
    // From the head: nothing to send, still a valid chunk.
    let r = origin.edge_get(&path(head)).await;
    assert_eq!(r.status(), StatusCode::OK);
    let bytes = r.bytes().await.unwrap();
    assert!(decode_journal(&bytes).unwrap().is_empty());
    // Malformed positions are a 400 with the reason.
    let bad = origin.edge_get(&format!("/v1/filters/{filter}/journal/{}?after=1&after_id=x", start.generation)).await;
    assert_eq!(bad.status(), StatusCode::BAD_REQUEST);
    // And only for the edge.
    let r = origin.http.get(format!("{}{}", origin.base, path(head))).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_journal_off_manifests_and_segments_are_as_before() {
    let origin = TestOrigin::on_services(|c| c.journal_enabled = false).await;
    let filter = unique_filter("nojournal");
    create(&origin, &filter).await;
    origin.insert_all(&filter, &random_keys(100)).await;
    let m = manifest(&origin, &filter).await;
    assert_eq!(m.journal, None);
    let bytes = segment(&origin, &filter, m.generation, 0).await;
    assert_eq!(decode_segment(&bytes).unwrap().header().journal, None, "format version 1");
    let r = origin.edge_get(&format!("/v1/filters/{filter}/journal/{}?after=1&after_id=0-0", m.generation)).await;
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
}

/// A write that read the state while it still named a generation, and adds after that
/// generation was retired, must still succeed: its bits went everywhere they had to (the
/// generation is unreadable now), so the journal append is a no-op like the add. Found by CI:
/// an automatic resize retired the replaced generation under an insert, which failed with 503.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adds_and_appends_to_a_retired_generation_are_harmless_no_ops() {
    let origin = TestOrigin::on_services(|_| {}).await;
    let filter = unique_filter("jretired");
    create(&origin, &filter).await;
    let store = origin.state.gate.filter_store().clone();
    let meta = store.state_for_write(&filter).await.unwrap().readable().unwrap();
    let hashes = || vec![hash_key(b"late-writer", meta.params.seed)];

    store.retire_generation(&filter, meta).await.unwrap();
    assert!(meta.journal, "the generation keeps a journal: the add appends to it");
    store.add(&filter, meta, hashes()).await.expect("an add to a retired generation (and its journal) is a no-op");
    assert!(store.journal_head(&filter, meta).await.is_err(), "a retired journal has no head to serve");
    assert!(store.segments_intact(&filter, meta).await.is_err(), "nor is it intact");

    // Clearing leftovers keeps the marker: a late writer still finds it.
    store.delete_orphans(&filter, vec![]).await.unwrap();
    store.add(&filter, meta, hashes()).await.expect("the journal's marker outlives a leftovers sweep");
    let r = origin.edge_get(&format!("/v1/filters/{filter}/journal/{}?after=1&after_id=0-0", meta.generation)).await;
    assert_ne!(r.status(), StatusCode::OK, "a retired journal is never served");
}

/// Whether `read` says "nothing after `at`, which is the head", with Redis's clock as it read
/// (what a copy checks its own clock against).
fn caught_up_at(read: &JournalRead, at: JournalPosition) -> bool {
    matches!(read, JournalRead::Entries { to, entries, head, store_time_us: Some(_) }
        if *to == at && entries.is_empty() && *head == at.added)
}

/// A local copy's read barrier, and the background reads that keep its read lease, ask a single
/// Redis "anything after my position?" in two plain commands whose replies are a few bytes. A
/// deleted journal (flushed, evicted), one trimmed to nothing and a retired one have nothing
/// after any position either: none may pass for "caught up" (a complete read, which would
/// renew a lease) while an add after the position was acknowledged, nor at the head, where an
/// empty `XRANGE` of a missing stream looks exactly like "nothing new".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_read_barrier_never_takes_a_journal_gone_or_emptied_for_caught_up() {
    let origin = TestOrigin::on_services(|_| {}).await;
    let store = origin.state.gate.filter_store().clone();
    let mut redis = redis_connection().await;

    // A copy at the journal's head, then an add it has not read.
    let behind_by_one_add = async |name: &str| -> (String, Generation, JournalPosition) {
        let filter = unique_filter(name);
        create(&origin, &filter).await;
        let meta = store.state(&filter).await.unwrap().readable().unwrap();
        let at = store.journal_head(&filter, meta).await.unwrap();
        let read = store.catch_up_journal(&filter, meta, JournalPage { after: at, max_entries: 1024 }).await.unwrap();
        assert!(caught_up_at(&read, at), "nothing after the head: {read:?}");
        let key = &random_keys(1)[0];
        assert_eq!(origin.put(&filter, key).await.status(), StatusCode::CREATED);
        let read = store.catch_up_journal(&filter, meta, JournalPage { after: at, max_entries: 1024 }).await.unwrap();
        assert!(matches!(&read, JournalRead::Entries { entries, .. } if entries.len() == 1), "{read:?}");
        (filter, meta, at)
    };
    let journal_key = |filter: &str, meta: Generation| format!("bg:{{{filter}}}:jnl:{}", meta.generation);

    let (filter, meta, at) = behind_by_one_add("jbarrier-trim").await;
    let () =
        redis::cmd("XTRIM").arg(journal_key(&filter, meta)).arg("MAXLEN").arg(0).query_async(&mut redis).await.unwrap();
    let read = store.catch_up_journal(&filter, meta, JournalPage { after: at, max_entries: 1024 }).await;
    assert!(matches!(read, Ok(JournalRead::Reset)), "trimmed past the copy: load it anew, got {read:?}");

    let (filter, meta, at) = behind_by_one_add("jbarrier-gone").await;
    let head = store.journal_head(&filter, meta).await.unwrap();
    let () = redis::cmd("DEL").arg(journal_key(&filter, meta)).query_async(&mut redis).await.unwrap();
    let read = store.catch_up_journal(&filter, meta, JournalPage { after: at, max_entries: 1024 }).await;
    assert!(read.is_err(), "a journal gone: the copy cannot answer, got {read:?}");
    let read = store.catch_up_journal(&filter, meta, JournalPage { after: head, max_entries: 1024 }).await;
    assert!(read.is_err(), "a journal gone, read from its old head: never complete, got {read:?}");

    let (filter, meta, at) = behind_by_one_add("jbarrier-retired").await;
    let head = store.journal_head(&filter, meta).await.unwrap();
    let read = store.catch_up_journal(&filter, meta, JournalPage { after: head, max_entries: 1024 }).await.unwrap();
    assert!(caught_up_at(&read, head), "{read:?}");
    store.retire_generation(&filter, meta).await.unwrap();
    for from in [at, head] {
        let read = store.catch_up_journal(&filter, meta, JournalPage { after: from, max_entries: 1024 }).await;
        assert!(read.is_err(), "a retired journal is never a complete read, got {read:?}");
    }
}

/// Whether a generation keeps a journal is decided when it is named and recorded with it, not
/// each origin's own setting: an origin with the journal off still appends to a generation
/// that has one. Otherwise its adds would be missing from the journal, and an edge catching up
/// from it would answer "no" for keys that origin acknowledged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn origins_that_disagree_on_the_journal_never_hide_an_add_from_it() {
    let on = TestOrigin::on_services(|_| {}).await;
    let off = TestOrigin::on_services(|c| c.journal_enabled = false).await;

    // Named by the origin with the journal on: every add appends, through either origin.
    let filter = unique_filter("jmixed");
    create(&on, &filter).await;
    let head0 = manifest(&on, &filter).await.journal.expect("a journal from its creation");
    let keys = random_keys(40);
    for key in &keys {
        assert_eq!(off.put(&filter, key).await.status(), StatusCode::CREATED);
    }
    let head1 = manifest(&on, &filter).await.journal.unwrap();
    assert_eq!(head1.added, head0.added + 40, "each add through the journal-off origin appended");
    assert_eq!(manifest(&off, &filter).await.journal, Some(head1), "both origins serve the same head");

    // Named by the origin with the journal off: no journal, through either origin.
    let plain = unique_filter("jplain");
    create(&off, &plain).await;
    for key in &keys[..5] {
        assert_eq!(on.put(&plain, key).await.status(), StatusCode::CREATED);
    }
    let m = manifest(&on, &plain).await;
    assert_eq!(m.journal, None, "a generation named without a journal has none");
    let r = on.edge_get(&format!("/v1/filters/{plain}/journal/{}?after=1&after_id=0-0", m.generation)).await;
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    assert!(decode_segment(&segment(&on, &plain, m.generation, 0).await).unwrap().header().journal.is_none());
}

/// The origin's answer to a journal request from `after`: the chunk, and the head and the
/// readable generation its headers name.
async fn journal_chunk(
    origin: &TestOrigin,
    filter: &str,
    generation: u64,
    after: JournalPosition,
) -> (JournalPosition, Option<u64>, Option<u64>) {
    let path =
        format!("/v1/filters/{filter}/journal/{generation}?after={}&after_id={}", after.added, after.stream_id());
    let r = origin.edge_get(&path).await;
    assert_eq!(r.status(), StatusCode::OK, "{path}");
    let header = |name: &str| r.headers().get(name).map(|v| v.to_str().unwrap().parse::<u64>().unwrap());
    let (head, readable) = (header("x-bloomgate-journal-head"), header("x-bloomgate-readable-generation"));
    let bytes = r.bytes().await.unwrap();
    let chunk = decode_journal(&bytes).expect("a chunk that verifies");
    assert_eq!((chunk.generation, chunk.from), (generation, after.added));
    (chunk.to, head, readable)
}

/// With a journal, the manifest names the head alone (no segment versions: copies name their
/// own positions), and a journal chunk says whether it can stand for the next manifest: it
/// reaches the head, of the generation a manifest would name. The replaced generation's journal,
/// still served until it is retired, names the generation that replaced it, so an edge holding
/// it asks for the manifest instead of taking the chunk as one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_journal_chunk_says_when_it_can_stand_for_the_manifest() {
    // A grace long enough that the replaced generation is still served when asked.
    let origin = TestOrigin::on_services(|c| c.rebuild_grace_ms = 120_000).await;
    let filter = unique_filter("jmanifest");
    create(&origin, &filter).await;
    origin.insert_all(&filter, &random_keys(300)).await;
    let m0 = manifest(&origin, &filter).await;
    let head0 = m0.journal.expect("the manifest names the journal head");
    assert!(m0.segment_versions.is_empty(), "a manifest with a journal head lists no versions");
    assert_eq!(m0.validate(), Ok(()));

    // Nothing written since: the chunk is empty and stands for the manifest.
    let (to, head, readable) = journal_chunk(&origin, &filter, m0.generation, head0).await;
    assert_eq!((to, head, readable), (head0, Some(head0.added), Some(m0.generation)));

    for key in random_keys(5) {
        assert_eq!(origin.put(&filter, &key).await.status(), StatusCode::CREATED);
    }
    let (to, head, readable) = journal_chunk(&origin, &filter, m0.generation, head0).await;
    assert_eq!((to.added, head, readable), (head0.added + 5, Some(head0.added + 5), Some(m0.generation)));

    // A rebuild names a new generation; the old one keeps taking adds until its grace ends.
    let rebuilding = tokio::spawn(origin.rebuild_now(&filter));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let m1 = loop {
        let m = manifest(&origin, &filter).await;
        if m.generation != m0.generation {
            break m;
        }
        assert!(std::time::Instant::now() < deadline, "the rebuild did not switch within 60 s");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    assert_eq!(origin.put(&filter, &random_keys(1)[0]).await.status(), StatusCode::CREATED);
    let (to, head, readable) = journal_chunk(&origin, &filter, m0.generation, head0).await;
    assert_eq!((to.added, head), (head0.added + 6, Some(head0.added + 6)), "the replaced generation took the add");
    assert_eq!(readable, Some(m1.generation), "and names the generation a manifest would");
    rebuilding.abort();
}

/// An add whose journal id runs ahead of Redis's clock (the clock stepped back behind the
/// journal's last id, here made by appending an entry ten minutes ahead) records the span of
/// ids given ahead of the clock, which a sealed chunk whose end lies in it must not be taken
/// for complete; an add on a clock that did not step records nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_add_given_an_id_ahead_of_redis_clock_records_the_span() {
    use bloomgate_filter::sealed_chunk::{seal, ChunkClock, Seal, SteppedBack};
    let origin = TestOrigin::on_services(|_| {}).await;
    let store = origin.state.gate.filter_store().clone();
    let mut redis = redis_connection().await;
    let filter = unique_filter("jstep");
    create(&origin, &filter).await;
    let meta = store.state(&filter).await.unwrap().readable().unwrap();
    let (journal, steps) =
        (format!("bg:{{{filter}}}:jnl:{}", meta.generation), format!("bg:{{{filter}}}:jstep:{}", meta.generation));

    let keys = random_keys(2);
    assert_eq!(origin.put(&filter, &keys[0]).await.status(), StatusCode::CREATED);
    let exists: bool = redis::cmd("EXISTS").arg(&steps).query_async(&mut redis).await.unwrap();
    assert!(!exists, "a clock that did not step records nothing");

    let before = redis_now_ms(&mut redis).await;
    let ahead = before + 600_000;
    let _: String = redis::cmd("XADD")
        .arg(&journal)
        .arg(format!("{ahead}-0"))
        .arg("h")
        .arg("")
        .query_async(&mut redis)
        .await
        .unwrap();
    assert_eq!(origin.put(&filter, &keys[1]).await.status(), StatusCode::CREATED);
    let after = redis_now_ms(&mut redis).await;
    let span: std::collections::HashMap<String, u64> =
        redis::cmd("HGETALL").arg(&steps).query_async(&mut redis).await.unwrap();
    let (from, to) = (span["from"], span["to"]);
    assert_eq!(span["format"], 1, "the record carries its format");
    assert!((before..=after).contains(&from), "the clock when the add ran: {from} not in {before}..={after}");
    assert_eq!(to, ahead, "the id it was given");
    let ttl: i64 = redis::cmd("PTTL").arg(&steps).query_async(&mut redis).await.unwrap();
    assert!(ttl > 0, "kept as long as the journal keeps entries, then gone: {ttl}");

    let clock = ChunkClock::new(250).unwrap();
    let inside = clock.chunk_of(from + 1_000);
    let stepped = [SteppedBack { from_ms: from, to_ms: to }];
    assert_eq!(seal(&clock, inside, ahead + 1, ahead + 1, &stepped), Seal::Unsealable);
    for key in &keys {
        assert!(origin.lookup_all(&filter, std::slice::from_ref(key)).await[0].0, "an acknowledged key not seen");
    }
}
