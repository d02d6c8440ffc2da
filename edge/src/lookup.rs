//! The lookup handlers (wasm32 only): one key (`GET`/`HEAD`) and a batch (`POST …/lookups`).
//! Both decide each key the same way ([`key_decision`]): its segment at hand or loaded, what
//! the segment says, and whether a "no" still stands when answering.
//!
//! Each handler also times its own work on the isolate's clock, less its waits for the origin,
//! into the isolate's report (`CpuSpent`): only answers that needed no load (a fresh manifest
//! and a usable copy at hand), which is what a lookup costs once the isolate is warm.

use crate::answer;
use crate::batch_body::{self, BatchBodyError};
use crate::body::{json, problem, relay_not_found, request_bounded};
use crate::config::EdgeConfig;
use crate::decide::{self, Decision};
use crate::feed;
use crate::feed_follow::FeedAnswer;
use crate::isolate::{now_ms, with_isolate};
use crate::manifest::ManifestFetch;
use crate::manifest_fetch;
use crate::segments;
use crate::upstream::{self, BatchForward};
use bloomgate_client::api::{CpuFigure, CpuSpent, KeyAnswer, Keys, Lookups};
use bloomgate_client::headers;
use bloomgate_filter::{decode_path_key, validate_filter_name, Manifest};
use std::future::Future;
use std::rc::Rc;
use worker::{Context, Request, Response, Result};

/// Largest batch body the edge reads; the key count is bounded by `MAX_BATCH` (config).
const MAX_BATCH_BODY: usize = 4 * 1024 * 1024;

/// A request's own CPU time on the isolate's clock, less the waits it marks, and whether it had
/// to load anything (a manifest or a segment): then it is not a warm answer's cost.
struct Stopwatch {
    started: f64,
    waited: f64,
    loaded: bool,
}

impl Stopwatch {
    fn start() -> Stopwatch {
        Stopwatch { started: now_ms(), waited: 0.0, loaded: false }
    }

    /// Awaits `io`, not counting the time it takes.
    async fn wait<T>(&mut self, io: impl Future<Output = T>) -> T {
        let at = now_ms();
        let out = io.await;
        self.waited += now_ms() - at;
        out
    }

    /// Milliseconds of own work so far; None if the request loaded something.
    fn warm_ms(&self) -> Option<f64> {
        (!self.loaded).then(|| now_ms() - self.started - self.waited)
    }
}

/// The manifest, at hand or fetched (the stopwatch then marks a load).
async fn manifest(config: &EdgeConfig, ctx: &Context, filter: &str, sw: &mut Stopwatch) -> ManifestFetch {
    if let Some((m, asked_at)) = manifest_fetch::at_hand(config, ctx, filter) {
        return ManifestFetch::Found(m, asked_at);
    }
    sw.loaded = true;
    sw.wait(manifest_fetch::get(config, ctx, filter)).await
}

/// What the edge does with one normalised key under `manifest` (asked for at `asked_at`): its
/// segment at hand, else loaded (the stopwatch then marks a load), what the segment says, and
/// whether a "no" still stands now.
async fn key_decision(
    config: &EdgeConfig,
    ctx: &Context,
    manifest: &Rc<Manifest>,
    asked_at: f64,
    key: &[u8],
    sw: &mut Stopwatch,
) -> Decision {
    let index = decide::segment_of(manifest, key);
    let segment = match segments::at_hand(config, manifest, index) {
        Some(copy) => Some(copy),
        None => {
            sw.loaded = true;
            sw.wait(segments::segment(config, ctx, manifest, asked_at, index)).await
        }
    };
    let decision = decide::decide(manifest, segment.as_ref(), key);
    decide::answer_now(decision, asked_at, now_ms(), config.freshness_secs)
}

/// `GET`/`HEAD /v1/filters/{filter}/keys/{key}`.
pub(crate) async fn handle_lookup(
    config: &EdgeConfig,
    ctx: &Context,
    req: &Request,
    filter: &str,
    raw_key: &str,
) -> Result<Response> {
    let mut sw = Stopwatch::start();
    if let Err(e) = validate_filter_name(filter) {
        return problem(&answer::bad_request(e.to_string()));
    }
    // The origin decodes the raw segment with the same function: both read the same key, or
    // both refuse the URL, so a "no" here is never about another key than the origin's.
    let key_text = match decode_path_key(raw_key) {
        Ok(key) => key,
        Err(e) => return problem(&answer::bad_request(e.to_string())),
    };
    if let Some(settings) = config.shared_feed {
        match feed::answer(config, settings, ctx, filter, key_text.as_bytes()) {
            FeedAnswer::NotSeen { generation } => {
                with_isolate(config, |iso| iso.counts.feed_no += 1);
                return not_seen(config, &sw, filter, &key_text, generation);
            }
            FeedAnswer::Maybe => return forwarded(config, req, &mut sw).await,
            FeedAnswer::Unknown => {}
        }
    }
    let (manifest, asked_at) = match manifest(config, ctx, filter, &mut sw).await {
        ManifestFetch::Found(m, asked_at) => (m, asked_at),
        ManifestFetch::Unknown(body) => return relay_not_found(&body),
        ManifestFetch::Failed => return upstream::forward(config, req).await,
    };
    let key = match manifest.key_format.normalize(key_text.as_bytes()) {
        Ok(key) => key,
        Err(e) => return problem(&answer::bad_request(e.to_string())),
    };
    match key_decision(config, ctx, &manifest, asked_at, &key, &mut sw).await {
        Decision::NotSeen => not_seen(config, &sw, filter, &key_text, manifest.generation),
        Decision::ForwardMaybe | Decision::ForwardNoSegment | Decision::ForwardStale => {
            forwarded(config, req, &mut sw).await
        }
    }
}

/// 404 "not seen", answered here under `generation`.
fn not_seen(config: &EdgeConfig, sw: &Stopwatch, filter: &str, key_text: &str, generation: u64) -> Result<Response> {
    let not_seen = answer::not_seen(filter, key_text);
    let r = json(&not_seen, 404, answer::JSON)?;
    r.headers().set(headers::ANSWERED_BY, not_seen.answered_by.as_str())?;
    r.headers().set(headers::GENERATION, &generation.to_string())?;
    account(config, sw, 1, |cpu| &mut cpu.edge_no);
    with_isolate(config, |iso| iso.counts.edge_no += 1);
    Ok(r)
}

/// The lookup forwarded to the origin, its answer relayed.
async fn forwarded(config: &EdgeConfig, req: &Request, sw: &mut Stopwatch) -> Result<Response> {
    let relayed = sw.wait(upstream::forward(config, req)).await;
    account(config, sw, 1, |cpu| &mut cpu.forwarded);
    with_isolate(config, |iso| iso.counts.forwarded += 1);
    relayed
}

/// Adds a warm request's own time, over `units` (keys), to the figure `figure` picks. A lookup's
/// own work takes microseconds: one measured at 2 ms or more was descheduled, and is set aside.
fn account(config: &EdgeConfig, sw: &Stopwatch, units: u64, figure: fn(&mut CpuSpent) -> &mut CpuFigure) {
    if let Some(ms) = sw.warm_ms() {
        with_isolate(config, |iso| figure(&mut iso.cpu).add_short(units, ms));
    }
}

/// `POST /v1/filters/{filter}/lookups`.
pub(crate) async fn handle_batch(config: &EdgeConfig, ctx: &Context, req: Request, filter: &str) -> Result<Response> {
    let mut sw = Stopwatch::start();
    if let Err(e) = validate_filter_name(filter) {
        return problem(&answer::bad_request(e.to_string()));
    }
    let declared = req.headers().get("content-length")?.and_then(|v| v.trim().parse::<usize>().ok());
    if declared.is_some_and(|len| len > MAX_BATCH_BODY) {
        return problem(&answer::body_too_large(MAX_BATCH_BODY));
    }
    let mut req = req;
    // Bounded while read and while parsed (`batch_body`): a body without a Content-Length is
    // refused at the limit, and keys past `MAX_BATCH` are counted, not kept.
    let parsed = match sw.wait(request_bounded(&mut req, MAX_BATCH_BODY)).await? {
        Ok(body) => batch_body::parse_keys(&body, config.max_batch),
        Err(e) => Err(e),
    };
    let batch = match parsed {
        Ok(keys) => Keys { keys },
        Err(BatchBodyError::TooLarge) => return problem(&answer::body_too_large(MAX_BATCH_BODY)),
        Err(BatchBodyError::TooManyKeys(got)) => return problem(&answer::batch_too_large(config.max_batch, got)),
        Err(BatchBodyError::Invalid(e)) => return problem(&answer::bad_request(format!("invalid JSON body: {e}"))),
    };
    let mut results: Vec<Option<KeyAnswer>> = vec![None; batch.keys.len()];
    let (manifest, asked_at) = match manifest(config, ctx, filter, &mut sw).await {
        ManifestFetch::Found(m, asked_at) => (m, asked_at),
        ManifestFetch::Unknown(body) => return relay_not_found(&body),
        ManifestFetch::Failed => {
            let all: Vec<usize> = (0..batch.keys.len()).collect();
            return match ask_origin(config, filter, &batch.keys, &all, &mut results).await? {
                Some(refused) => Ok(refused),
                None => json(&collect(filter, results), 200, answer::JSON),
            };
        }
    };
    let (mut edge_no, mut maybe) = (Vec::new(), Vec::new());
    for (i, raw) in batch.keys.iter().enumerate() {
        let key = match manifest.key_format.normalize(raw.as_bytes()) {
            Ok(k) => k,
            Err(e) => return problem(&answer::bad_request(format!("keys[{i}]: {e}"))),
        };
        match key_decision(config, ctx, &manifest, asked_at, &key, &mut sw).await {
            Decision::NotSeen => edge_no.push(i),
            _ => maybe.push(i),
        }
    }
    let counted = (batch.keys.len() as u64, maybe.len() as u64);
    if let Some(refused) = sw.wait(ask_origin(config, filter, &batch.keys, &maybe, &mut results)).await? {
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
            results[i] = Some(answer::not_seen(filter, &batch.keys[i]));
        }
    }
    let answered = json(&collect(filter, results), 200, answer::JSON);
    account(config, &sw, counted.0, |cpu| &mut cpu.batch_key);
    with_isolate(config, |iso| {
        iso.counts.batches += 1;
        iso.counts.batch_keys += counted.0;
        iso.counts.batch_keys_forwarded += counted.1;
    });
    answered
}

/// Asks the origin about the keys at `which` and puts its answers in `results`. Some(response)
/// when the origin refused the batch or could not be asked: that response goes to the client.
async fn ask_origin(
    config: &EdgeConfig,
    filter: &str,
    keys: &[String],
    which: &[usize],
    results: &mut [Option<KeyAnswer>],
) -> Result<Option<Response>> {
    if which.is_empty() {
        return Ok(None);
    }
    let asked: Vec<String> = which.iter().map(|i| keys[*i].clone()).collect();
    match upstream::forward_batch(config, filter, asked).await? {
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
fn collect(filter: &str, results: Vec<Option<KeyAnswer>>) -> Lookups {
    Lookups { filter: filter.to_owned(), results: results.into_iter().flatten().collect() }
}
