//! The edge kept current by the origin's insert journal, under `wrangler dev` in front of a
//! real origin over real Redis and Cassandra: writes reach the edge within S without segments
//! fetched again (and, without a journal, by refetching them); an edge behind the journal's
//! retention (410) fetches its segments whole and stays correct; a rebuild while the edge holds
//! segments the journal brought forward; a damaged journal answer never turns into a "no" for an
//! acknowledged key. The rules themselves (which copy may answer, what a chunk does to a copy,
//! hand-built damaged and gapped chunks) are tested natively in `edge/src/{decide,tail,catch_up}.rs`.
//!
//! Every check of an acknowledged key is against the bound S itself: a "not seen" from a lookup
//! that started S or more after the acknowledgement fails the test; one that started earlier
//! is allowed. Write rates are bounded and deadlines are S plus a margin, not machine speed.
//!
//! # Running
//! `scripts/services start` and `scripts/edge-build` (builds the worker, installs wrangler),
//! then `cargo test -p bloomgate-tests --test edge_journal -- --test-threads 1`.
//! `scripts/test` does all of it. What the edge asked of the origin is read from the origin's
//! `/metrics` (`bloomgate_edge_requests_total{kind="segment"|"journal"}`).

use bloomgate_filter::{JournalPosition, Manifest};
use bloomgate_tests::edge::{batch as edge_batch, edge_stack, EdgeStack};
use bloomgate_tests::origin::{TestOrigin, EDGE_SECRET, TOKEN};
use bloomgate_tests::{random_keys, unique_filter};
use reqwest::StatusCode;
use std::time::{Duration, Instant};

/// The freshness bound the edge runs with: its default.
const S_SECS: u32 = 2;

fn s() -> Duration {
    Duration::from_secs(u64::from(S_SECS))
}

/// One lookup at the edge: status, who answered, and the generation of an edge "no".
async fn edge_get(http: &reqwest::Client, base: &str, filter: &str, key: &str) -> (StatusCode, String, Option<u64>) {
    let r = http.get(format!("{base}/v1/filters/{filter}/keys/{key}")).send().await.unwrap();
    let header = |name: &str| r.headers().get(name).map(|v| v.to_str().unwrap().to_owned());
    let by = header("x-bloomgate-answered-by").unwrap_or_default();
    let generation = header("x-bloomgate-generation").map(|g| g.parse().unwrap());
    (r.status(), by, generation)
}

async fn manifest(origin: &TestOrigin, filter: &str) -> Manifest {
    let r = origin
        .http
        .get(format!("{}/v1/filters/{filter}/manifest", origin.base))
        .header("x-bloomgate-edge-secret", EDGE_SECRET);
    r.send().await.unwrap().json().await.unwrap()
}

/// Requests of `kind` (manifest, segment, journal) the origin has served to edges.
async fn edge_requests(origin: &TestOrigin, kind: &str) -> f64 {
    origin.metric(&format!("bloomgate_edge_requests_total{{kind=\"{kind}\"}}")).await
}

/// A new filter of several segments with 1,000 stored keys, and an edge at `edge_base` that
/// holds every one of its segments (400 absent keys answered there). Returns the filter and
/// the manifest the edge's copies are current to.
async fn warm_filter(origin: &TestOrigin, edge_base: &str, http: &reqwest::Client, prefix: &str) -> (String, Manifest) {
    let filter = unique_filter(prefix);
    origin.create_filter(&filter, 200_000, 0.01).await;
    origin.insert_all(&filter, &random_keys(1_000)).await;
    let manifest = manifest(origin, &filter).await;
    assert!(manifest.params.segment_count >= 3, "the test needs a filter of several segments");
    let answers = edge_batch(http, edge_base, &filter, &random_keys(400)).await;
    assert!(answers.iter().all(|(seen, _)| !*seen));
    assert!(answers.iter().filter(|(_, by)| by == "edge").count() >= 380, "the edge is not answering 'no' itself");
    (filter, manifest)
}

/// PUTs each key through the origin, at most 8 at a time (the 8 in flight are the bound on
/// the rate); returns each key with the time it was acknowledged.
async fn put_all(origin: &TestOrigin, filter: &str, keys: &[String]) -> Vec<(String, Instant)> {
    let mut acked = Vec::new();
    for group in keys.chunks(8) {
        let puts = group.iter().map(|key| async move {
            assert_eq!(origin.put(filter, key).await.status(), StatusCode::CREATED, "{key}");
            (key.clone(), Instant::now())
        });
        acked.extend(futures::future::join_all(puts).await);
    }
    acked
}

/// Looks the keys up at the edge; a key acknowledged S or more before the lookup started must
/// be "seen". Returns how many were.
async fn check_acknowledged(http: &reqwest::Client, base: &str, filter: &str, acked: &[(String, Instant)]) -> usize {
    let asked = Instant::now();
    let keys: Vec<String> = acked.iter().map(|(k, _)| k.clone()).collect();
    let answers = edge_batch(http, base, filter, &keys).await;
    for ((key, at), (seen, by)) in acked.iter().zip(&answers) {
        let age = asked.saturating_duration_since(*at);
        assert!(*seen || age < s(), "{key}, acknowledged {age:?} before the lookup, answered 'not seen' by {by}");
    }
    answers.iter().filter(|(seen, _)| *seen).count()
}

/// Checks the keys at the edge every 100 ms until all are seen; each round is held to the
/// bound, and all must be seen by S plus a margin (for a loaded machine) after the last
/// acknowledgement.
async fn until_all_seen(http: &reqwest::Client, base: &str, filter: &str, acked: &[(String, Instant)]) -> Duration {
    let last = acked.iter().map(|(_, at)| *at).max().unwrap();
    loop {
        if check_acknowledged(http, base, filter, acked).await == acked.len() {
            return last.elapsed();
        }
        assert!(last.elapsed() < s() + Duration::from_secs(15), "written keys still not all seen at the edge");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// What writing through the origin while looking the written keys up at the edge showed.
struct WritesSeen {
    /// From each key's acknowledgement to the start of the first edge lookup that saw it.
    seen_after: Vec<Duration>,
    /// Edge lookups answered "not seen" that started S or more after the key's acknowledgement.
    stale: Vec<(String, Duration)>,
    /// Manifest, segment and journal requests the origin served meanwhile.
    manifests: f64,
    segments: f64,
    journals: f64,
}

/// Warms an edge on a filter of several segments (every segment held), then writes `writes` keys
/// through the origin, one every 100 ms, each looked up at the edge every 50 ms from its
/// acknowledgement until it is seen. Every "not seen" is checked against the bound: one from a
/// lookup that started S or more after the acknowledgement is a violation.
async fn write_while_looking_up_at_the_edge(journal_enabled: bool, writes: usize) -> WritesSeen {
    let EdgeStack { origin, edge, proxy: _proxy } = edge_stack(S_SECS, |c| c.journal_enabled = journal_enabled).await;
    let http = reqwest::Client::new();
    let prefix = if journal_enabled { "journal" } else { "nojournal" };
    let (filter, manifest) = warm_filter(&origin, &edge.base, &http, prefix).await;
    assert_eq!(manifest.journal.is_some(), journal_enabled, "the manifest names the journal iff the origin keeps one");
    let (manifests_before, segments_before, journals_before) = (
        edge_requests(&origin, "manifest").await,
        edge_requests(&origin, "segment").await,
        edge_requests(&origin, "journal").await,
    );

    let started = Instant::now();
    let mut pollers = Vec::new();
    for (i, key) in random_keys(writes).into_iter().enumerate() {
        // A bounded write rate: 10 keys/s.
        tokio::time::sleep_until((started + Duration::from_millis(100) * i as u32).into()).await;
        assert_eq!(origin.put(&filter, &key).await.status(), StatusCode::CREATED);
        let acked = Instant::now();
        let (http, url) = (http.clone(), format!("{}/v1/filters/{filter}/keys/{key}", edge.base));
        pollers.push(tokio::spawn(async move {
            let mut stale = Vec::new();
            loop {
                let asked = acked.elapsed();
                let status = http.get(&url).send().await.unwrap().status();
                if status == StatusCode::OK {
                    return (asked, stale);
                }
                // A 503 is the origin not answering a forwarded lookup in time (a loaded
                // machine): no answer, never a "no"; ask again.
                if status == StatusCode::SERVICE_UNAVAILABLE {
                    assert!(asked < s() + Duration::from_secs(15), "{key}: 503s for {asked:?}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
                assert_eq!(status, StatusCode::NOT_FOUND, "{key}");
                if asked >= s() {
                    stale.push((key.clone(), asked));
                }
                assert!(asked < s() + Duration::from_secs(5), "{key} still not seen at the edge after {asked:?}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }));
    }
    let (mut seen_after, mut stale) = (Vec::new(), Vec::new());
    for poller in pollers {
        let (after, late) = poller.await.unwrap();
        seen_after.push(after);
        stale.extend(late);
    }
    seen_after.sort();
    WritesSeen {
        seen_after,
        stale,
        manifests: edge_requests(&origin, "manifest").await - manifests_before,
        segments: edge_requests(&origin, "segment").await - segments_before,
        journals: edge_requests(&origin, "journal").await - journals_before,
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_reach_the_edge_through_the_journal_within_s_without_segment_fetches() {
    let run = write_while_looking_up_at_the_edge(true, 150).await;
    let (p50, p99) = (percentile(&run.seen_after, 0.5), percentile(&run.seen_after, 0.99));
    eprintln!(
        "journal: {} writes seen at the edge after p50 {p50:?}, p99 {p99:?}, max {:?} (S = {S_SECS} s); \
         {} journal, {} manifest and {} segment requests meanwhile",
        run.seen_after.len(),
        run.seen_after.last().unwrap(),
        run.journals,
        run.manifests,
        run.segments
    );
    assert!(run.stale.is_empty(), "'not seen' at the edge S or more after the acknowledgement: {:?}", run.stale);
    assert_eq!(run.segments, 0.0, "segments were fetched again for writes");
    assert!(run.journals >= 3.0, "the edge caught up with {} journal requests in 15 s", run.journals);
    // Each refresh is one journal request that reaches the head of the generation still named:
    // it is the next manifest. (A refresh that could not say so asks for the manifest, which
    // is correct but costs a second request; a few are allowed for a loaded machine.)
    assert!(
        run.manifests * 4.0 <= run.journals,
        "{} manifests beside {} journal requests: refreshes did not go by the journal",
        run.manifests,
        run.journals
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_journal_writes_reach_the_edge_by_refetching_segments() {
    let run = write_while_looking_up_at_the_edge(false, 60).await;
    eprintln!(
        "no journal: {} writes seen at the edge after p50 {:?}, p99 {:?}; {} segment and {} journal requests",
        run.seen_after.len(),
        percentile(&run.seen_after, 0.5),
        percentile(&run.seen_after, 0.99),
        run.segments,
        run.journals
    );
    assert!(run.stale.is_empty(), "'not seen' at the edge S or more after the acknowledgement: {:?}", run.stale);
    assert_eq!(run.journals, 0.0, "the origin keeps no journal: the edge has none to ask");
    assert!(run.manifests >= 3.0, "the edge refreshed its manifest {} times in 6 s", run.manifests);
    assert!(run.segments >= 3.0, "writes reached the edge with only {} segment fetches", run.segments);
}

/// The origin's answer to a journal request from `after`, as the edge would ask it.
async fn journal_status(origin: &TestOrigin, filter: &str, generation: u64, after: JournalPosition) -> StatusCode {
    let url = format!(
        "{}/v1/filters/{filter}/journal/{generation}?after={}&after_id={}",
        origin.base,
        after.added,
        after.stream_id()
    );
    origin.http.get(url).header("x-bloomgate-edge-secret", EDGE_SECRET).send().await.unwrap().status()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edge_behind_the_journals_retention_fetches_segments_whole_and_stays_correct() {
    // Redis trims a stream by whole nodes (100 entries by default): 400 adds past a limit of 10
    // are sure to drop the entries just after where the edge's copies stop.
    let EdgeStack { origin, edge, proxy: _proxy } = edge_stack(S_SECS, |c| c.journal_max_entries = 10).await;
    let http = reqwest::Client::new();
    let (filter, warm) = warm_filter(&origin, &edge.base, &http, "retention").await;
    let held_at = warm.journal.expect("the origin keeps a journal");

    // No lookups meanwhile: the edge's copies stay where they are while 400 adds go by.
    let written = put_all(&origin, &filter, &random_keys(400)).await;
    assert_eq!(
        journal_status(&origin, &filter, warm.generation, held_at).await,
        StatusCode::GONE,
        "the journal still holds the entries after the edge's copies: the test would not reach a 410"
    );
    // Past S, the edge's next lookup asks for a new manifest and tries to catch up.
    tokio::time::sleep(s() + Duration::from_millis(200)).await;
    let (segments_before, journals_before) =
        (edge_requests(&origin, "segment").await, edge_requests(&origin, "journal").await);
    let seen = check_acknowledged(&http, &edge.base, &filter, &written).await;
    assert_eq!(seen, written.len(), "every key acknowledged more than S ago is seen");
    let absent = edge_batch(&http, &edge.base, &filter, &random_keys(400)).await;
    assert!(absent.iter().all(|(seen, _)| !*seen));
    let at_edge = absent.iter().filter(|(_, by)| by == "edge").count();
    let segments = edge_requests(&origin, "segment").await - segments_before;
    let journals = edge_requests(&origin, "journal").await - journals_before;
    eprintln!("retention: {journals} journal requests (410), {segments} segments fetched whole; {at_edge} of 400 absent keys answered at the edge");
    assert!(journals >= 1.0, "the edge did not ask the journal");
    assert!(
        segments >= f64::from(warm.params.segment_count),
        "{segments} segments fetched for {} dropped copies",
        warm.params.segment_count
    );
    assert!(at_edge >= 380, "the edge answers 'no' itself again from whole segments: {at_edge} of 400");

    // The whole copies are current to the journal again: later writes come through it.
    let segments_before = edge_requests(&origin, "segment").await;
    let later = put_all(&origin, &filter, &random_keys(5)).await;
    let took = until_all_seen(&http, &edge.base, &filter, &later).await;
    eprintln!("retention: later writes seen at the edge {took:?} after the last one");
    assert_eq!(edge_requests(&origin, "segment").await, segments_before, "segments fetched again after the reset");
}

/// The generation the origin serves, None while its filter is lost.
async fn origin_generation(origin: &TestOrigin, filter: &str) -> Option<u64> {
    origin.state.gate.filter_store().state(filter).await.ok().and_then(|s| s.active).map(|m| m.generation)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rebuild_while_the_edge_holds_segments_the_journal_brought_forward() {
    let EdgeStack { origin, edge, proxy: _proxy } = edge_stack(S_SECS, |_| {}).await;
    let http = reqwest::Client::new();
    let (filter, warm) = warm_filter(&origin, &edge.base, &http, "rebuild-journal").await;
    let first = warm.generation;

    // The held copies are brought forward by the journal, none fetched again.
    let segments_before = edge_requests(&origin, "segment").await;
    let mut acked = put_all(&origin, &filter, &random_keys(20)).await;
    until_all_seen(&http, &edge.base, &filter, &acked).await;
    assert_eq!(edge_requests(&origin, "segment").await, segments_before, "copies were fetched whole, not caught up");

    // A rebuild, with writes going on through it and after it (5 keys/s); every acknowledged
    // key is held to the bound at the edge throughout.
    let r = http.post(format!("{}/v1/filters/{filter}/rebuild", origin.base)).bearer_auth(TOKEN).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::ACCEPTED);
    let started = Instant::now();
    let mut switched_at = None;
    let mut from_new = None;
    while from_new.is_none() || switched_at.is_some_and(|at: Instant| at.elapsed() < s() * 2) {
        assert!(started.elapsed() < Duration::from_secs(90), "no switch and move within 90 s");
        acked.extend(put_all(&origin, &filter, &random_keys(1)).await);
        check_acknowledged(&http, &edge.base, &filter, &acked).await;
        if switched_at.is_none() && origin_generation(&origin, &filter).await.is_some_and(|g| g != first) {
            switched_at = Some(Instant::now());
        }
        // An absent key: once S (and the origin's 200 ms metadata cache) has passed since the
        // switch, a "no" from the edge must come from the new generation, never an old copy.
        let key = &random_keys(1)[0];
        let asked = Instant::now();
        let (status, by, generation) = edge_get(&http, &edge.base, &filter, key).await;
        // (503: the origin did not answer a forwarded lookup in time; never a "no".)
        assert!(status == StatusCode::NOT_FOUND || status == StatusCode::SERVICE_UNAVAILABLE, "absent key: {status}");
        if by == "edge" {
            let generation = generation.expect("an edge 'no' names its generation");
            let settled = switched_at.is_some_and(|at| asked >= at + s() + Duration::from_secs(1));
            assert!(!(settled && generation == first), "a 'no' from generation {first} after the switch");
            if generation != first && from_new.is_none() {
                from_new = Some(started.elapsed());
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let switched = switched_at.unwrap().duration_since(started);
    eprintln!(
        "rebuild: switched {switched:?} after the request, the edge answered from the new generation {:?} after it; {} keys written",
        from_new.unwrap().saturating_sub(switched),
        acked.len()
    );
    // Every key written before, during and after the rebuild is seen at the edge.
    until_all_seen(&http, &edge.base, &filter, &acked).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_journal_answer_never_turns_into_a_no_for_an_acknowledged_key() {
    let EdgeStack { origin, proxy, edge } = edge_stack(S_SECS, |_| {}).await;
    let http = reqwest::Client::new();
    let (filter, _) = warm_filter(&origin, &edge.base, &http, "damaged-journal").await;

    // From now on every answer over 1 KiB reaches the edge damaged: journal chunks (one add of
    // 200 keys is a 3 KiB chunk) and whole segments; manifests and single lookups pass.
    proxy.corrupt_large_chunks();
    let journals_before = edge_requests(&origin, "journal").await;
    let written = random_keys(200);
    origin.insert_all(&filter, &written).await;
    let acked = Instant::now();
    // For 3 S: every written key looked up S or more after its acknowledgement is seen, and once
    // the edge's manifest postdates the write, no absent key is answered at the edge (its copies
    // are behind, the journal cannot bring them forward, whole segments arrive damaged).
    let mut round = 0;
    while acked.elapsed() < s() * 3 {
        for key in written.iter().skip(round * 10).take(10) {
            let asked = acked.elapsed();
            let (status, by, _) = edge_get(&http, &edge.base, &filter, key).await;
            // (503: the origin did not answer the forwarded lookup in time; never a "no".)
            assert!(
                status == StatusCode::OK
                    || status == StatusCode::SERVICE_UNAVAILABLE
                    || (asked < s() && status == StatusCode::NOT_FOUND),
                "{key}, acknowledged {asked:?} before, answered {status} by {by:?}"
            );
        }
        for key in random_keys(5) {
            let asked = acked.elapsed();
            let (status, by, _) = edge_get(&http, &edge.base, &filter, &key).await;
            assert!(status == StatusCode::NOT_FOUND || status == StatusCode::SERVICE_UNAVAILABLE, "{status}");
            // (Half a second of slack: an absent key's "no" is right either way; this only shows
            // that the copies the journal could not bring forward are not used.)
            let settled = asked >= s() + Duration::from_millis(500);
            assert!(!settled || by != "edge", "a 'no' from a copy the damaged journal could not bring forward");
        }
        round += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let journals = edge_requests(&origin, "journal").await - journals_before;
    assert!(journals >= 1.0, "the edge never asked the journal: nothing was damaged");

    // Healed: the edge answers "no" itself again, and every written key is seen.
    proxy.heal();
    let healed = Instant::now();
    loop {
        let absent = edge_batch(&http, &edge.base, &filter, &random_keys(100)).await;
        if absent.iter().filter(|(_, by)| by == "edge").count() >= 95 {
            break;
        }
        assert!(healed.elapsed() < s() + Duration::from_secs(5), "the edge does not answer 'no' itself after healing");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let answers = edge_batch(&http, &edge.base, &filter, &written).await;
    assert!(answers.iter().all(|(seen, _)| *seen), "a written key 'not seen' after healing");
    eprintln!("damaged journal: {journals} journal requests while damaged; the edge answered 'no' itself again {:?} after healing", healed.elapsed());
}
