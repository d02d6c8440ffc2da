//! The Workers runtime glue (wasm32 only): entry points, handlers and manifests. Every decision
//! it acts on comes from `route`, `decide` and `answer`, which are tested natively.
//!
//! A manifest past half its freshness is refreshed in the background (`ctx.wait_until`), so
//! under steady traffic no request waits for one. Before a new manifest is used, the segments
//! held for its filter are brought up to its journal head (`holding::catch_up`): published
//! first, it would make them unusable and send lookups to fetch them whole. Under a journal,
//! the refresh itself is one journal request (`holding::refresh`): a chunk reaching the head
//! of the generation still named is the next manifest. Segments are
//! loaded and kept by `holding`; the isolate's state and the one-fetch-at-a-time machinery are
//! in `isolate`; subrequests to the origin, with their timeouts and relays, in `upstream`.

use crate::answer;
use crate::config::{self, EdgeConfig};
use crate::decide::{self, Decision};
use crate::holding;
use crate::isolate::{lead, now_ms, once, with_isolate, ManifestFetch, TAKEOVER_MS};
use crate::route::{self, Route};
use crate::upstream::{self, BatchForward};
use bloomgate_client::api::{KeyAnswer, Keys, Lookups};
use bloomgate_client::{headers, paths};
use bloomgate_filter::{decode_path_key, validate_filter_name, Manifest};
use serde::Serialize;
use std::rc::Rc;
use worker::{console_error, console_log, event, Context, Env, Method, Request, Response, Result};

/// Largest batch body the edge reads; the key count is bounded by `MAX_BATCH` (config).
const MAX_BATCH_BODY: usize = 4 * 1024 * 1024;

#[event(start)]
fn start() {
    // Rust panics would otherwise surface as a bare "unreachable" trap in the logs.
    console_error_panic_hook::set_once();
}

/// A setting from the worker's environment: `EDGE_SECRET` is a secret (`wrangler secret put`,
/// `.dev.vars` locally), the others are vars (`wrangler.toml`, `--var`).
fn setting(env: &Env, name: &str) -> Option<String> {
    if name == config::EDGE_SECRET {
        env.secret(name).ok().map(|s| s.to_string())
    } else {
        env.var(name).ok().map(|v| v.to_string())
    }
}

#[event(fetch)]
async fn fetch(req: Request, env: Env, ctx: Context) -> Result<Response> {
    let (method, path) = (req.method().to_string(), req.path());
    let head = req.method() == Method::Head;
    let config = EdgeConfig::from_lookup(|name| setting(&env, name));
    #[cfg(feature = "planted-bugs")] // negative controls (test builds only)
    crate::planted::select(setting(&env, crate::planted::VAR).as_deref());
    let response = match &config {
        Ok(config) => route(config, &ctx, req, &method, &path).await?,
        Err(err) => {
            console_error!("config: {err}");
            json(&answer::misconfigured(), 500, answer::PROBLEM_JSON)?
        }
    };
    // Whatever answered (the edge, a relayed origin answer, a refusal): see answer::CACHE_CONTROL.
    response.headers().set(headers::CACHE_CONTROL, answer::CACHE_CONTROL)?;
    if config.is_ok_and(|c| c.log_requests) {
        console_log!("{method} {path} -> {}", response.status_code());
    }
    if head {
        // The answer to a HEAD is the GET's status and headers without its body.
        let status = response.status_code();
        return Ok(Response::empty()?.with_status(status).with_headers(response.headers().clone()));
    }
    Ok(response)
}

/// The answer to a request, by its route.
async fn route(config: &EdgeConfig, ctx: &Context, req: Request, method: &str, path: &str) -> Result<Response> {
    match route::classify(method, path) {
        Route::Health => json(&answer::health(), 200, answer::JSON),
        Route::Lookup { filter, key } => handle_lookup(config, ctx, &req, filter, key).await,
        Route::BatchLookup { filter } => handle_batch(config, ctx, req, filter).await,
        Route::WriteNotAllowed => {
            let r = json(&answer::write_not_allowed(method, path), 405, answer::PROBLEM_JSON)?;
            r.headers().set("allow", "GET, HEAD")?;
            Ok(r)
        }
        Route::NotFound => json(&answer::not_found(path), 404, answer::PROBLEM_JSON),
    }
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
    let segment = holding::segment(config, ctx, &manifest, asked_at, index).await;
    let decision = decide::decide(&manifest, segment.as_ref(), &key);
    match decide::answer_now(decision, asked_at, now_ms(), config.freshness_secs) {
        Decision::NotSeen => {
            let not_seen = answer::not_seen(filter, &key_text);
            let r = json(&not_seen, 404, answer::JSON)?;
            r.headers().set(headers::ANSWERED_BY, not_seen.answered_by.as_str())?;
            r.headers().set(headers::GENERATION, &manifest.generation.to_string())?;
            Ok(r)
        }
        Decision::ForwardMaybe | Decision::ForwardNoSegment | Decision::ForwardStale => {
            upstream::forward(config, req).await
        }
    }
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
    let batch: Keys = match serde_json::from_slice(&body) {
        Ok(b) => b,
        Err(e) => return json(&answer::bad_request(format!("invalid JSON body: {e}")), 400, answer::PROBLEM_JSON),
    };
    if batch.keys.len() > config.max_batch {
        return json(&answer::batch_too_large(config.max_batch, batch.keys.len()), 413, answer::PROBLEM_JSON);
    }
    let all: Vec<usize> = (0..batch.keys.len()).collect();
    let mut results: Vec<Option<KeyAnswer>> = vec![None; batch.keys.len()];
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
        let segment = holding::segment(config, ctx, &manifest, asked_at, index).await;
        let decision = decide::decide(&manifest, segment.as_ref(), &key);
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
            results[i] = Some(answer::not_seen(filter, &batch.keys[i]));
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

/// Fetches the manifest (from the journal alone when the one held names a journal head, see
/// `holding::refresh`), brings the segments held for it up to its journal head, and keeps it
/// in isolate memory unless a newer one is there already.
async fn fetch_and_keep_manifest(config: EdgeConfig, filter: String) -> ManifestFetch {
    let held = with_isolate(&config, |iso| iso.manifests.get(&filter).map(|(m, _)| m.clone()));
    let refreshed = match held {
        Some(old) => holding::refresh(&config, &old).await,
        None => None,
    };
    let outcome = match refreshed {
        Some((next, asked_at)) => ManifestFetch::Found(next, asked_at),
        None => fetch_manifest(&config, &filter).await,
    };
    if let ManifestFetch::Found(m, asked_at) = &outcome {
        holding::catch_up(&config, m, *asked_at).await;
        with_isolate(&config, |iso| {
            let newer = iso.manifests.get(&filter).is_none_or(|(_, t)| *t <= *asked_at);
            if newer {
                iso.manifests.insert(filter.clone(), (m.clone(), *asked_at));
            }
        });
    }
    outcome
}

async fn fetch_manifest(config: &EdgeConfig, filter: &str) -> ManifestFetch {
    // The time is taken before asking: freshness counts from the ask, not the answer.
    let asked_at = now_ms();
    let url = format!("{}{}", config.origin_url, paths::manifest(filter));
    // A manifest arriving after S is of no use: it gets at most S (and the cap).
    let Some(budget) = decide::fetch_budget_ms(asked_at, asked_at, config.freshness_secs) else {
        return ManifestFetch::Failed;
    };
    let reply = match upstream::edge_get(config, &url, budget, None).await {
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

fn relay_bytes(status: u16, body: &[u8]) -> Result<Response> {
    let r = Response::from_bytes(body.to_vec())?.with_status(status);
    r.headers().set(headers::CONTENT_TYPE, answer::PROBLEM_JSON)?;
    Ok(r)
}

fn relay_json<T: Serialize>(body: &T) -> Result<Response> {
    json(body, 200, answer::JSON)
}

fn json<T: Serialize>(body: &T, status: u16, content_type: &str) -> Result<Response> {
    let response = Response::from_json(body)?.with_status(status);
    response.headers().set(headers::CONTENT_TYPE, content_type)?;
    Ok(response)
}
