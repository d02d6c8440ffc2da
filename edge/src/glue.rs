//! The Workers runtime glue (wasm32 only): entry points and I/O. Every decision it acts on
//! comes from `route`, `decide` and `answer`, which are tested natively.
//!
//! Isolate state lives in a thread-local (an isolate runs one thread): manifests with the time
//! they were asked for, a byte-bounded LRU of verified segments, and the fetches in flight
//! ([`Flights`]), so concurrent requests for the same missing manifest or segment share one
//! subrequest without ever awaiting another request's promise (workerd cancels a request
//! that does). A manifest past half its freshness is refreshed in the background
//! (`ctx.wait_until`), so under steady traffic no request waits for one. Subrequests to the
//! origin, with their timeouts and relays, are in `upstream`.

use crate::answer;
use crate::config::EdgeConfig;
use crate::decide::{self, Decision};
use crate::flight::{Check, Flights, Role};
use crate::lru::ByteLru;
use crate::route::{self, Route};
use crate::upstream::{self, BatchForward, BatchResult};
use bloomgate_filter::{decode_path_key, validate_filter_name, Manifest, Segment};
use serde::Serialize;
use std::cell::RefCell;
use std::collections::HashMap;
use std::future::Future;
use std::hash::Hash;
use std::rc::Rc;
use std::time::Duration;
use worker::{console_error, event, Cache, Context, Delay, Env, Headers, Method, Request, Response, Result};

/// Largest batch body the edge reads; the key count is bounded by `MAX_BATCH` (config).
const MAX_BATCH_BODY: usize = 4 * 1024 * 1024;

/// How often a request waiting on another's fetch checks back (its own timer keeps it alive).
const FOLLOW_POLL: Duration = Duration::from_millis(5);
/// A fetch this old is presumed lost with its request (cancelled): a waiting request takes over.
const TAKEOVER_MS: f64 = 10_000.0;

type SegmentKey = (String, u64, u32);

/// Outcome of asking the origin for a manifest.
#[derive(Clone)]
enum ManifestFetch {
    Found(Rc<Manifest>, f64),
    /// The origin says the filter does not exist: its problem body, relayed.
    Unknown(Rc<Vec<u8>>),
    Failed,
}

struct Isolate {
    manifests: HashMap<String, (Rc<Manifest>, f64)>,
    segments: ByteLru<SegmentKey, Rc<Segment>>,
    segment_flights: Flights<(SegmentKey, u64), Option<Rc<Segment>>>,
    manifest_flights: Flights<String, ManifestFetch>,
}

thread_local! {
    static ISOLATE: RefCell<Option<Isolate>> = const { RefCell::new(None) };
}

fn with_isolate<T>(config: &EdgeConfig, f: impl FnOnce(&mut Isolate) -> T) -> T {
    ISOLATE.with(|cell| {
        let mut slot = cell.borrow_mut();
        let isolate = slot.get_or_insert_with(|| Isolate {
            manifests: HashMap::new(),
            segments: ByteLru::new(config.memory_cache_bytes),
            segment_flights: Flights::default(),
            manifest_flights: Flights::default(),
        });
        f(isolate)
    })
}

fn now_ms() -> f64 {
    js_sys::Date::now()
}

#[event(start)]
fn start() {
    // Rust panics would otherwise surface as a bare "unreachable" trap in the logs.
    console_error_panic_hook::set_once();
}

#[event(fetch)]
async fn fetch(req: Request, env: Env, ctx: Context) -> Result<Response> {
    let method = req.method().to_string();
    let path = req.path();
    let config = match EdgeConfig::from_lookup(|name| env.var(name).ok().map(|v| v.to_string())) {
        Ok(config) => config,
        Err(err) => {
            console_error!("config: {err}");
            return json(&answer::misconfigured(), 500, answer::PROBLEM_JSON);
        }
    };
    let head = req.method() == Method::Head;
    let response = match route::classify(&method, &path) {
        Route::Health => json(&answer::health(), 200, answer::JSON),
        Route::Lookup { filter, key } => handle_lookup(&config, &ctx, &req, filter, key).await,
        Route::BatchLookup { filter } => handle_batch(&config, &ctx, req, filter).await,
        Route::WriteNotAllowed => {
            let r = json(&answer::write_not_allowed(&method, &path), 405, answer::PROBLEM_JSON)?;
            r.headers().set("allow", "GET, HEAD")?;
            Ok(r)
        }
        Route::NotFound => json(&answer::not_found(&path), 404, answer::PROBLEM_JSON),
    }?;
    // No line per request: under `wrangler dev` every console message is kept for a DevTools
    // client that may attach later, so a line per request grew workerd's V8 heap until it died
    // (the 35-minute chaos run, at ~64,000 requests). Errors are still logged.
    if head {
        // The answer to a HEAD is the GET's status and headers without its body.
        let status = response.status_code();
        return Ok(Response::empty()?.with_status(status).with_headers(response.headers().clone()));
    }
    Ok(response)
}

async fn handle_lookup(
    config: &EdgeConfig,
    ctx: &Context,
    req: &Request,
    filter: &str,
    raw_key: &str,
) -> Result<Response> {
    if let Err(e) = validate_filter_name(filter) {
        return json(&answer::bad_request(e.to_string()), 400, answer::PROBLEM_JSON);
    }
    // The origin decodes the raw segment with the same function: both read the same key, or
    // both refuse the URL, so a "no" here is never about another key than the origin's.
    let key_text = match decode_path_key(raw_key) {
        Ok(key) => key,
        Err(e) => return json(&answer::bad_request(e.to_string()), 400, answer::PROBLEM_JSON),
    };
    let (manifest, asked_at) = match manifest(config, ctx, filter).await {
        ManifestFetch::Found(m, asked_at) => (m, asked_at),
        ManifestFetch::Unknown(body) => return relay_bytes(404, &body),
        ManifestFetch::Failed => return upstream::forward(config, req).await,
    };
    let key = match manifest.key_format.normalize(key_text.as_bytes()) {
        Ok(key) => key,
        Err(e) => return json(&answer::bad_request(e.to_string()), 400, answer::PROBLEM_JSON),
    };
    let index = decide::segment_of(&manifest, &key);
    let segment = segment(config, ctx, &manifest, asked_at, index).await;
    let decision = decide::decide(&manifest, segment.as_ref().map(|s| s.view()).as_ref(), &key);
    match decide::answer_now(decision, asked_at, now_ms(), config.freshness_secs) {
        Decision::NotSeen => {
            let r = json(&answer::not_seen(filter, &key_text), 404, answer::JSON)?;
            r.headers().set(answer::ANSWERED_BY, "edge")?;
            r.headers().set(answer::GENERATION, &manifest.generation.to_string())?;
            Ok(r)
        }
        Decision::ForwardMaybe | Decision::ForwardNoSegment | Decision::ForwardStale => {
            upstream::forward(config, req).await
        }
    }
}

#[derive(serde::Deserialize)]
struct BatchBody {
    keys: Vec<String>,
}

async fn handle_batch(config: &EdgeConfig, ctx: &Context, mut req: Request, filter: &str) -> Result<Response> {
    if let Err(e) = validate_filter_name(filter) {
        return json(&answer::bad_request(e.to_string()), 400, answer::PROBLEM_JSON);
    }
    let declared = req.headers().get("content-length")?.and_then(|v| v.trim().parse::<usize>().ok());
    if declared.is_some_and(|len| len > MAX_BATCH_BODY) {
        return json(&answer::body_too_large(MAX_BATCH_BODY), 413, answer::PROBLEM_JSON);
    }
    let body = req.bytes().await?;
    if body.len() > MAX_BATCH_BODY {
        return json(&answer::body_too_large(MAX_BATCH_BODY), 413, answer::PROBLEM_JSON);
    }
    let batch: BatchBody = match serde_json::from_slice(&body) {
        Ok(b) => b,
        Err(e) => return json(&answer::bad_request(format!("invalid JSON body: {e}")), 400, answer::PROBLEM_JSON),
    };
    if batch.keys.len() > config.max_batch {
        return json(&answer::batch_too_large(config.max_batch, batch.keys.len()), 413, answer::PROBLEM_JSON);
    }
    let all: Vec<usize> = (0..batch.keys.len()).collect();
    let mut results: Vec<Option<serde_json::Value>> = vec![None; batch.keys.len()];
    let (manifest, asked_at) = match manifest(config, ctx, filter).await {
        ManifestFetch::Found(m, asked_at) => (m, asked_at),
        ManifestFetch::Unknown(body) => return relay_bytes(404, &body),
        ManifestFetch::Failed => {
            return match ask_origin(config, filter, &batch.keys, &all, &mut results).await? {
                Some(refused) => Ok(refused),
                None => relay_json(&collect(filter, results)),
            };
        }
    };
    let (mut edge_no, mut maybe) = (Vec::new(), Vec::new());
    for (i, raw) in batch.keys.iter().enumerate() {
        let key = match manifest.key_format.normalize(raw.as_bytes()) {
            Ok(k) => k,
            Err(e) => return json(&answer::bad_request(format!("keys[{i}]: {e}")), 400, answer::PROBLEM_JSON),
        };
        let index = decide::segment_of(&manifest, &key);
        let segment = segment(config, ctx, &manifest, asked_at, index).await;
        let decision = decide::decide(&manifest, segment.as_ref().map(|s| s.view()).as_ref(), &key);
        match decide::answer_now(decision, asked_at, now_ms(), config.freshness_secs) {
            Decision::NotSeen => edge_no.push(i),
            _ => maybe.push(i),
        }
    }
    if let Some(refused) = ask_origin(config, filter, &batch.keys, &maybe, &mut results).await? {
        return Ok(refused);
    }
    // The origin's answer took time: the edge's "no"s stand only while their manifest is fresh.
    let stale = decide::answer_now(Decision::NotSeen, asked_at, now_ms(), config.freshness_secs) != Decision::NotSeen;
    if stale {
        if let Some(refused) = ask_origin(config, filter, &batch.keys, &edge_no, &mut results).await? {
            return Ok(refused);
        }
    } else {
        for i in edge_no {
            results[i] = Some(
                serde_json::to_value(answer::not_seen(filter, &batch.keys[i]))
                    .map_err(|e| worker::Error::RustError(e.to_string()))?,
            );
        }
    }
    relay_json(&collect(filter, results))
}

/// Asks the origin about the keys at `which` and puts its answers in `results`. Some(response)
/// when the origin refused the batch or could not be asked: that response goes to the client.
async fn ask_origin(
    config: &EdgeConfig,
    filter: &str,
    keys: &[String],
    which: &[usize],
    results: &mut [Option<serde_json::Value>],
) -> Result<Option<Response>> {
    if which.is_empty() {
        return Ok(None);
    }
    let asked: Vec<&str> = which.iter().map(|i| keys[*i].as_str()).collect();
    match upstream::forward_batch(config, filter, &asked).await? {
        BatchForward::Answered(answers) => {
            for (i, value) in which.iter().zip(answers.results) {
                results[*i] = Some(value);
            }
            Ok(None)
        }
        BatchForward::Refused(response) => Ok(Some(response)),
    }
}

/// The batch answer, once every key has one.
fn collect(filter: &str, results: Vec<Option<serde_json::Value>>) -> BatchResult {
    BatchResult { filter: filter.to_owned(), results: results.into_iter().flatten().collect() }
}

/// The manifest, from isolate memory while fresh (refreshed in the background from half its
/// freshness on), else from the origin: one fetch per isolate at a time, the others wait.
async fn manifest(config: &EdgeConfig, ctx: &Context, filter: &str) -> ManifestFetch {
    let cached = with_isolate(config, |iso| iso.manifests.get(filter).cloned());
    if let Some((m, asked_at)) = cached {
        let now = now_ms();
        if decide::manifest_is_fresh(asked_at, now, config.freshness_secs) {
            if decide::manifest_wants_refresh(asked_at, now, config.freshness_secs) {
                refresh_manifest_ahead(config, ctx, filter);
            }
            return ManifestFetch::Found(m, asked_at);
        }
    }
    let outcome = once(
        config,
        |iso| &mut iso.manifest_flights,
        filter.to_owned(),
        || fetch_and_keep_manifest(config.clone(), filter.to_owned()),
    )
    .await;
    match outcome {
        // Another request's fetch that took longer than the freshness bound: not usable.
        ManifestFetch::Found(_, asked_at) if !decide::manifest_is_fresh(asked_at, now_ms(), config.freshness_secs) => {
            ManifestFetch::Failed
        }
        outcome => outcome,
    }
}

/// Starts fetching the manifest's successor in this request's `wait_until`, unless a fetch is
/// already under way; requests keep answering from the copy in hand meanwhile.
fn refresh_manifest_ahead(config: &EdgeConfig, ctx: &Context, filter: &str) {
    let key = filter.to_owned();
    let Some(id) = with_isolate(config, |iso| iso.manifest_flights.lead_if_idle(&key, now_ms(), TAKEOVER_MS)) else {
        return;
    };
    let config = config.clone();
    ctx.wait_until(async move {
        let fetch = fetch_and_keep_manifest(config.clone(), key.clone());
        lead(&config, |iso| &mut iso.manifest_flights, key, id, fetch).await;
    });
}

/// Fetches the manifest and keeps it in isolate memory unless a newer one is there already.
async fn fetch_and_keep_manifest(config: EdgeConfig, filter: String) -> ManifestFetch {
    let outcome = fetch_manifest(&config, &filter).await;
    if let ManifestFetch::Found(m, asked_at) = &outcome {
        with_isolate(&config, |iso| {
            let newer = iso.manifests.get(&filter).is_none_or(|(_, t)| *t <= *asked_at);
            if newer {
                iso.manifests.insert(filter.clone(), (m.clone(), *asked_at));
            }
        });
    }
    outcome
}

/// Which of the isolate's flight tables a fetch uses.
type FlightsOf<K, V> = fn(&mut Isolate) -> &mut Flights<K, V>;

/// Runs `fetch` for `key` once per isolate at a time. The first request leads: it fetches in
/// its own context. Others follow: they check back on their own timer for the leader's
/// result (plain data), and lead the next attempt if the leader went away or is late.
async fn once<K, V, Fut>(config: &EdgeConfig, flights: FlightsOf<K, V>, key: K, fetch: impl Fn() -> Fut) -> V
where
    K: Eq + Hash + Clone + 'static,
    V: Clone + 'static,
    Fut: Future<Output = V>,
{
    loop {
        let id = match with_isolate(config, |iso| flights(iso).join(&key, now_ms(), TAKEOVER_MS)) {
            Role::Lead(id) => return lead(config, flights, key, id, fetch()).await,
            Role::Follow(id) => id,
        };
        let mut waiting = FlightGuard { flights, key: key.clone(), id, leader: false };
        loop {
            Delay::from(FOLLOW_POLL).await;
            match with_isolate(config, |iso| flights(iso).check(&key, id, now_ms(), TAKEOVER_MS)) {
                Check::Waiting => continue,
                Check::Ready(outcome) => {
                    waiting.disarm();
                    return outcome;
                }
                Check::Gone => {
                    waiting.disarm();
                    break;
                }
            }
        }
    }
}

/// The leader's part: fetch, then post the result for the followers.
async fn lead<K, V>(config: &EdgeConfig, flights: FlightsOf<K, V>, key: K, id: u64, fetch: impl Future<Output = V>) -> V
where
    K: Eq + Hash + Clone + 'static,
    V: Clone + 'static,
{
    let mut leading = FlightGuard { flights, key, id, leader: true };
    let outcome = fetch.await;
    leading.disarm();
    with_isolate(config, |iso| flights(iso).finish(&leading.key, id, outcome.clone()));
    outcome
}

/// Leaves a flight when a request's future is dropped mid-wait (its request cancelled), so a
/// leader's followers do not wait out [`TAKEOVER_MS`] and a follower's place is not held.
struct FlightGuard<K: Eq + Hash + Clone + 'static, V: Clone + 'static> {
    flights: FlightsOf<K, V>,
    key: K,
    id: u64,
    leader: bool,
}

impl<K: Eq + Hash + Clone + 'static, V: Clone + 'static> FlightGuard<K, V> {
    fn disarm(&mut self) {
        self.id = 0; // flight ids start at 1
    }
}

impl<K: Eq + Hash + Clone + 'static, V: Clone + 'static> Drop for FlightGuard<K, V> {
    fn drop(&mut self) {
        if self.id == 0 {
            return;
        }
        ISOLATE.with(|cell| {
            if let Some(iso) = cell.try_borrow_mut().ok().as_deref_mut().and_then(Option::as_mut) {
                let flights = (self.flights)(iso);
                if self.leader {
                    flights.abandon(&self.key, self.id);
                } else {
                    flights.leave(&self.key, self.id);
                }
            }
        });
    }
}

async fn fetch_manifest(config: &EdgeConfig, filter: &str) -> ManifestFetch {
    // The time is taken before asking: freshness counts from the ask, not the answer.
    let asked_at = now_ms();
    let url = format!("{}/v1/filters/{filter}/manifest", config.origin_url);
    // A manifest arriving after S is of no use: it gets at most S (and the cap).
    let Some(budget) = decide::fetch_budget_ms(asked_at, asked_at, config.freshness_secs) else {
        return ManifestFetch::Failed;
    };
    let reply = match upstream::edge_get(config, &url, budget).await {
        Ok(r) => r,
        Err(e) => {
            console_error!("manifest {filter}: {e}");
            return ManifestFetch::Failed;
        }
    };
    match reply.status {
        200 => match serde_json::from_slice::<Manifest>(&reply.body) {
            Ok(m) if m.validate().is_ok() && m.filter == filter => ManifestFetch::Found(Rc::new(m), asked_at),
            _ => {
                console_error!("manifest {filter}: unusable body");
                ManifestFetch::Failed
            }
        },
        404 => ManifestFetch::Unknown(Rc::new(reply.body)),
        status => {
            console_error!("manifest {filter}: origin answered {status}");
            ManifestFetch::Failed
        }
    }
}

/// A verified segment at least as new as the manifest (asked for at `asked_at`) lists: isolate
/// memory, then the Cache API, then the origin. None when no usable copy could be had in what
/// is left of the manifest's freshness (the lookup is forwarded).
async fn segment(
    config: &EdgeConfig,
    ctx: &Context,
    manifest: &Rc<Manifest>,
    asked_at: f64,
    index: u32,
) -> Option<Rc<Segment>> {
    let version = manifest.segment_version(index)?;
    let key: SegmentKey = (manifest.filter.clone(), manifest.generation, index);
    let held = with_isolate(config, |iso| iso.segments.get(&key));
    if let Some(s) = held.filter(|s| decide::segment_usable(manifest, s.header())) {
        return Some(s);
    }
    once(
        config,
        |iso| &mut iso.segment_flights,
        (key.clone(), version),
        || load_and_keep_segment(config, ctx, manifest, asked_at, key.clone(), version),
    )
    .await
}

/// Loads a segment and keeps it: in isolate memory, and (when the origin sent it) in the
/// Cache API, written after the answer in `wait_until`.
async fn load_and_keep_segment(
    config: &EdgeConfig,
    ctx: &Context,
    manifest: &Rc<Manifest>,
    asked_at: f64,
    key: SegmentKey,
    version: u64,
) -> Option<Rc<Segment>> {
    let index = key.2;
    let (segment, from_origin) = load_segment(config, manifest, asked_at, index, version).await?;
    with_isolate(config, |iso| iso.segments.insert(key, segment.clone(), segment.as_bytes().len()));
    if from_origin {
        let cache_url = decide::segment_cache_url(manifest, index, segment.header().version);
        let bytes = segment.as_bytes().to_vec();
        ctx.wait_until(async move {
            if let Err(e) = put_in_cache(&cache_url, bytes).await {
                console_error!("cache put {cache_url}: {e}");
            }
        });
    }
    Some(segment)
}

/// A usable segment from the Cache API (false) or else the origin (true).
async fn load_segment(
    config: &EdgeConfig,
    manifest: &Manifest,
    asked_at: f64,
    index: u32,
    version: u64,
) -> Option<(Rc<Segment>, bool)> {
    let cache_url = decide::segment_cache_url(manifest, index, version);
    if let Ok(Some(mut cached)) = Cache::default().get(cache_url.as_str(), false).await {
        if let Ok(bytes) = cached.bytes().await {
            match Segment::decode(bytes) {
                Ok(s) if decide::segment_usable(manifest, s.header()) => return Some((Rc::new(s), false)),
                Ok(_) => console_error!("cached segment {cache_url} does not match the manifest: dropped"),
                Err(e) => console_error!("cached segment {cache_url} rejected: {e}"),
            }
        }
    }
    let url = format!(
        "{}/v1/filters/{}/segments/{}/{}?v={}",
        config.origin_url, manifest.filter, manifest.generation, index, version
    );
    // A segment arriving after the manifest's freshness could not answer "no" under it.
    let budget = decide::fetch_budget_ms(asked_at, now_ms(), config.freshness_secs)?;
    let bytes = match upstream::edge_get(config, &url, budget).await {
        Ok(r) if r.status == 200 => r.body,
        Ok(r) => {
            console_error!("segment {url}: origin answered {}", r.status);
            return None;
        }
        Err(e) => {
            console_error!("segment {url}: {e}");
            return None;
        }
    };
    match Segment::decode(bytes) {
        Ok(s) if decide::segment_usable(manifest, s.header()) => Some((Rc::new(s), true)),
        Ok(s) => {
            console_error!(
                "segment {url} is generation {} version {}: not usable for this manifest",
                s.header().generation,
                s.header().version
            );
            None
        }
        Err(e) => {
            console_error!("segment {url} rejected: {e}");
            None
        }
    }
}

async fn put_in_cache(url: &str, bytes: Vec<u8>) -> Result<()> {
    let headers = Headers::new();
    headers.set("cache-control", "public, max-age=31536000, immutable")?;
    headers.set("content-type", "application/vnd.bloomgate.segment")?;
    let response = Response::from_bytes(bytes)?.with_headers(headers);
    Cache::default().put(url, response).await
}

fn relay_bytes(status: u16, body: &[u8]) -> Result<Response> {
    let r = Response::from_bytes(body.to_vec())?.with_status(status);
    r.headers().set("content-type", answer::PROBLEM_JSON)?;
    Ok(r)
}

fn relay_json<T: Serialize>(body: &T) -> Result<Response> {
    json(body, 200, answer::JSON)
}

fn json<T: Serialize>(body: &T, status: u16, content_type: &str) -> Result<Response> {
    let response = Response::from_json(body)?.with_status(status);
    response.headers().set("content-type", content_type)?;
    Ok(response)
}
