//! Holding segments (wasm32 only): a usable copy from isolate memory, else one brought forward
//! by the insert journal, else the Cache API, else the origin; and the journal catch-up that
//! keeps held copies current. Decisions come from `decide`, `held` and `catch_up`.
//!
//! With a manifest that names its journal head, a copy answers only once current to that head.
//! Copies behind it (held since an older manifest, or from the Cache API, written there at any
//! time by any isolate) are brought forward by one journal request for the whole filter, from
//! the lowest position among them; the origin is asked for a segment whole only when no copy
//! can be brought forward (none held, a 410, a gap, a chunk too large to be worth it).

use crate::catch_up;
use crate::config::EdgeConfig;
use crate::decide;
use crate::held::{Applied, Held, Touched};
use crate::isolate::{now_ms, once, with_isolate, Isolate, SegmentKey};
use crate::upstream::{self, Failure};
use bloomgate_client::{headers, media, paths};
use bloomgate_filter::{decode_journal, JournalPosition, JournalView, Manifest, Segment};
use std::rc::Rc;
use worker::{console_error, Cache, Context, Headers, Response, Result};

/// A copy usable under the manifest (asked for at `asked_at`) for segment `index`. None when
/// none could be had in what is left of the manifest's freshness (the lookup is forwarded).
pub(crate) async fn segment(
    config: &EdgeConfig,
    ctx: &Context,
    manifest: &Rc<Manifest>,
    asked_at: f64,
    index: u32,
) -> Option<Held> {
    let wanted = decide::wanted(manifest, index)?;
    let key: SegmentKey = (manifest.filter.clone(), manifest.generation, index);
    match with_isolate(config, |iso| iso.segments.get(&key)) {
        Some(held) if decide::segment_usable(manifest, &held) => return Some(held),
        Some(held) if catch_up::behind(manifest, &held) => {
            if let Some(held) = caught_up(config, manifest, asked_at, &key).await {
                return Some(held);
            }
        }
        _ => {}
    }
    once(
        config,
        |iso| &mut iso.segment_flights,
        (key.clone(), wanted),
        || load_and_keep_segment(config, ctx, manifest, asked_at, key.clone()),
    )
    .await
}

/// Brings the filter's copies up to the manifest's head, then the copy of `key` if it is now usable.
async fn caught_up(config: &EdgeConfig, manifest: &Rc<Manifest>, asked_at: f64, key: &SegmentKey) -> Option<Held> {
    catch_up(config, manifest, asked_at).await;
    with_isolate(config, |iso| iso.segments.peek(key)).filter(|held| decide::segment_usable(manifest, held))
}

/// Loads a usable copy and keeps it: from the Cache API (brought forward by the journal if it
/// is behind), else from the origin, then also put in the Cache API after the answer.
async fn load_and_keep_segment(
    config: &EdgeConfig,
    ctx: &Context,
    manifest: &Rc<Manifest>,
    asked_at: f64,
    key: SegmentKey,
) -> Option<Held> {
    let index = key.2;
    if let Some(cached) = from_cache(manifest, index).await {
        if decide::segment_usable(manifest, &cached) {
            keep(config, &key, &cached);
            return Some(cached);
        }
        if catch_up::behind(manifest, &cached) {
            keep(config, &key, &cached);
            if let Some(held) = caught_up(config, manifest, asked_at, &key).await {
                return Some(held);
            }
        }
    }
    let held = from_origin(config, manifest, asked_at, index).await?;
    keep(config, &key, &held);
    let cache_url = decide::segment_cache_url(manifest, index, held.segment().header().version);
    let bytes = held.segment().as_bytes().to_vec();
    ctx.wait_until(async move {
        if let Err(e) = put_in_cache(&cache_url, bytes).await {
            console_error!("cache put {cache_url}: {e}");
        }
    });
    Some(held)
}

/// Keeps `held` in isolate memory, unless the copy there is further along (two loads of one
/// segment can finish in either order, and a Cache API copy can be older than the one held).
fn keep(config: &EdgeConfig, key: &SegmentKey, held: &Held) {
    with_isolate(config, |iso| {
        if !iso.segments.peek(key).is_some_and(|kept| kept.is_ahead_of(held)) {
            iso.segments.insert(key.clone(), held.clone(), held.bytes());
        }
    });
}

/// A copy of segment `index` of the manifest's generation from the Cache API, verified; it may
/// be behind the manifest (the caller decides).
async fn from_cache(manifest: &Manifest, index: u32) -> Option<Held> {
    let cache_url = decide::wanted_cache_url(manifest, index)?;
    let mut cached = Cache::default().get(cache_url.as_str(), false).await.ok()??;
    let bytes = cached.bytes().await.ok()?;
    match Segment::decode(bytes) {
        Ok(s) if s.header().generation == manifest.generation && s.header().params == manifest.params => {
            Some(Held::new(s))
        }
        Ok(_) => {
            console_error!("cached segment {cache_url} does not match the manifest: dropped");
            None
        }
        Err(e) => {
            console_error!("cached segment {cache_url} rejected: {e}");
            None
        }
    }
}

/// A copy of segment `index` from the origin, usable under the manifest.
async fn from_origin(config: &EdgeConfig, manifest: &Manifest, asked_at: f64, index: u32) -> Option<Held> {
    let url = format!("{}{}", config.origin_url, paths::segment_of(manifest, index)?);
    // A segment arriving after the manifest's freshness could not answer "no" under it.
    let budget = decide::fetch_budget_ms(asked_at, now_ms(), config.freshness_secs)?;
    let bytes = match upstream::edge_get(config, &url, budget, None).await {
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
    match Segment::decode(bytes).map(Held::new) {
        Ok(held) if decide::segment_usable(manifest, &held) => Some(held),
        Ok(held) => {
            let h = held.segment().header();
            console_error!(
                "segment {url} is generation {} version {} at journal {:?}: not usable for this manifest",
                h.generation,
                h.version,
                held.current_to().map(|at| at.added)
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
    // The edge's own Cache API entry (never sent to a client): public, or the Cache API would
    // not keep it; immutable, as the URL names what the copy is (see `decide::segment_cache_url`).
    headers.set(bloomgate_client::headers::CACHE_CONTROL, "public, max-age=31536000, immutable")?;
    headers.set(bloomgate_client::headers::CONTENT_TYPE, media::SEGMENT)?;
    let response = Response::from_bytes(bytes)?.with_headers(headers);
    Cache::default().put(url, response).await
}

/// Brings the copies held for the manifest's filter generation up to its journal head (or as
/// far as one bounded catch-up gets), once per isolate at a time. Nothing to do without a
/// journal, or when no copy is behind.
pub(crate) async fn catch_up(config: &EdgeConfig, manifest: &Rc<Manifest>, asked_at: f64) {
    let Some(head) = manifest.journal else {
        return;
    };
    let any_behind =
        with_isolate(config, |iso| held_of(iso, manifest).iter().any(|(_, h)| catch_up::behind(manifest, h)));
    if !any_behind {
        return;
    }
    let key = (manifest.filter.clone(), manifest.generation, head.added);
    once(config, |iso| &mut iso.catch_up_flights, key, || run_catch_up(config, manifest, head, asked_at)).await;
}

/// The copies held of the manifest's filter generation.
fn held_of(iso: &Isolate, manifest: &Manifest) -> Vec<(SegmentKey, Held)> {
    let keys = iso.segments.keys_where(|k| k.0 == manifest.filter && k.1 == manifest.generation);
    keys.into_iter().filter_map(|k| iso.segments.peek(&k).map(|h| (k, h))).collect()
}

/// The successor of `old` from the journal alone, asked for now: the entries since the lowest
/// position held (or `old`'s head), applied to the copies held on the way, taken as the new
/// manifest when they reach the head of the generation the origin still names
/// ([`catch_up::refreshed`]). None: ask for the manifest (the copies keep what was applied,
/// which is right for their positions whatever comes next).
pub(crate) async fn refresh(config: &EdgeConfig, old: &Manifest) -> Option<(Rc<Manifest>, f64)> {
    let head = old.journal?;
    let asked_at = now_ms();
    let (mut from, held_bytes) = with_isolate(config, |iso| {
        let held: Vec<Held> = held_of(iso, old).into_iter().map(|(_, h)| h).collect();
        (catch_up::refresh_from(head, &held), held.iter().map(Held::bytes).sum::<usize>())
    });
    for _ in 0..catch_up::MAX_JOURNAL_REQUESTS {
        let budget = decide::fetch_budget_ms(asked_at, now_ms(), config.freshness_secs)?;
        let url = catch_up::journal_url(&config.origin_url, &old.filter, old.generation, from);
        let reply = match upstream::edge_get(config, &url, budget, Some(catch_up::chunk_byte_limit(held_bytes))).await {
            Ok(r) if r.status == 200 => r,
            Ok(r) if r.status == 410 => {
                drop_where(config, old, |h| catch_up::gone(from, h.current_to()));
                return None;
            }
            // 404 (filter or generation gone), 5xx, timeouts: the manifest says what is true now.
            Ok(_) | Err(_) => return None,
        };
        let chunk = match decode_journal(&reply.body) {
            Ok(chunk) if chunk.generation == old.generation && chunk.from == from.added => chunk,
            Ok(_) => return None,
            Err(e) => {
                console_error!("journal {url} rejected: {e}");
                return None;
            }
        };
        with_isolate(config, |iso| apply(iso, old, &chunk));
        let header = |name: &str| reply.headers.get(name).ok().flatten().and_then(|v| v.trim().parse::<u64>().ok());
        let (head, readable) = (header(headers::JOURNAL_HEAD), header(headers::READABLE_GENERATION));
        if let Some(next) = catch_up::refreshed(old, chunk.to, head, readable) {
            return Some((Rc::new(next), asked_at));
        }
        // Cut short of the head (a long way behind): the rest follows from where it ended.
        let more = head.is_some_and(|head| catch_up::ask_again(from, chunk.to, head));
        if readable != Some(old.generation) || !more {
            return None;
        }
        from = chunk.to;
    }
    None
}

/// At most [`catch_up::MAX_JOURNAL_REQUESTS`] chunks, from the lowest position among the copies
/// behind, each applied to every copy held.
async fn run_catch_up(config: &EdgeConfig, manifest: &Manifest, head: JournalPosition, asked_at: f64) {
    for _ in 0..catch_up::MAX_JOURNAL_REQUESTS {
        let (from, behind_bytes) = with_isolate(config, |iso| {
            let behind: Vec<Held> =
                held_of(iso, manifest).into_iter().map(|(_, h)| h).filter(|h| catch_up::behind(manifest, h)).collect();
            (catch_up::journal_from(&behind), behind.iter().map(Held::bytes).sum::<usize>())
        });
        let Some(from) = from else {
            return;
        };
        // Entries arriving after the manifest's freshness would bring copies up to a head
        // that no longer counts; the next manifest will ask again.
        let Some(budget) = decide::fetch_budget_ms(asked_at, now_ms(), config.freshness_secs) else {
            return;
        };
        let url = catch_up::journal_url(&config.origin_url, &manifest.filter, manifest.generation, from);
        let limit = catch_up::chunk_byte_limit(behind_bytes);
        match upstream::edge_get(config, &url, budget, Some(limit)).await {
            Ok(r) if r.status == 200 => match decode_journal(&r.body) {
                Ok(chunk) => {
                    with_isolate(config, |iso| apply(iso, manifest, &chunk));
                    if !catch_up::ask_again(from, chunk.to, head.added) {
                        return;
                    }
                }
                Err(e) => {
                    console_error!("journal {url} rejected: {e}; dropping the copies behind");
                    drop_where(config, manifest, |h| catch_up::behind(manifest, h));
                    return;
                }
            },
            // The entries after `from` are no longer kept: the copies there are fetched whole
            // when needed; copies further on may still be covered.
            Ok(r) if r.status == 410 => {
                drop_where(config, manifest, |h| catch_up::behind(manifest, h) && catch_up::gone(from, h.current_to()));
            }
            Ok(r) => {
                console_error!("journal {url}: origin answered {}", r.status);
                return;
            }
            Err(Failure::TooLarge(limit)) => {
                // More bytes than the copies it would bring forward: fetching those whole,
                // when needed, costs less.
                console_error!("journal {url}: over {limit} bytes; dropping the copies behind");
                drop_where(config, manifest, |h| catch_up::behind(manifest, h));
                return;
            }
            Err(e) => {
                console_error!("journal {url}: {e}");
                return;
            }
        }
    }
}

/// Applies a chunk to every copy held of the manifest's filter generation, each taking the
/// entries after its own position; copies it cannot bring forward are dropped.
fn apply(iso: &mut Isolate, manifest: &Manifest, chunk: &JournalView<'_>) {
    let touched = Touched::of(chunk, &manifest.params);
    for (key, held) in held_of(iso, manifest) {
        match held.apply(chunk, &touched) {
            Applied::Unchanged => {}
            Applied::Forward(next) => {
                let bytes = next.bytes();
                iso.segments.replace(&key, next, bytes);
            }
            Applied::Drop(e) => {
                console_error!("segment {key:?} dropped: {e}");
                iso.segments.remove(&key);
            }
        }
    }
}

fn drop_where(config: &EdgeConfig, manifest: &Manifest, doomed: impl Fn(&Held) -> bool) {
    with_isolate(config, |iso| {
        for (key, held) in held_of(iso, manifest) {
            if doomed(&held) {
                iso.segments.remove(&key);
            }
        }
    });
}
