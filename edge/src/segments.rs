//! A usable copy of a segment (wasm32 only): from isolate memory (brought forward from the
//! journal tail if it is behind), else from the Cache API (brought forward the same way, and
//! written back if it was old), else from the origin. Decisions come from `decide`,
//! `catch_up`, `cache_copy` and the store; journal requests from `journal_sync`.
//!
//! Every Cache API entry is the edge's own: put behind a MAC over its cache key and content
//! (`cache_entry::seal`), and used only if that MAC verifies; an entry that does not is a miss
//! (the segment comes from the origin and its entry replaces the refused one), counted in the
//! isolate's report and logged the first time of its kind.
//!
//! A filter larger than the isolate's budget is the normal case at scale: then most lookups
//! find their segment in the Cache API, not in memory, and what keeps them cheap is that a
//! copy from there is brought forward from the tail the isolate keeps anyway, without asking
//! the origin (`tail`).

use crate::cache_entry::{self, EntryRefused};
use crate::config::EdgeConfig;
use crate::copy::SegmentCopy;
use crate::isolate::{now_ms, once, with_isolate};
use crate::store::SegmentKey;
use crate::tail::Forward;
use crate::upstream::{self, Sink};
use crate::{body, cache_copy, catch_up, decide, journal_sync};
use bloomgate_client::paths;
use bloomgate_filter::{JournalPosition, Manifest, Segment};
use std::rc::Rc;
use worker::{console_error, Cache, Context};

/// A copy usable under the manifest without any I/O: held, or held and brought forward from
/// the tail. The lookup's fast path.
pub(crate) fn at_hand(config: &EdgeConfig, manifest: &Manifest, index: u32) -> Option<SegmentCopy> {
    let key: SegmentKey = (manifest.filter.clone(), manifest.generation, index);
    with_isolate(config, |iso| {
        let copy = iso.store.get(&key)?;
        if decide::segment_usable(manifest, &copy) {
            return Some(copy);
        }
        if !catch_up::behind(manifest, &copy) {
            return None;
        }
        drop(copy);
        let started = now_ms();
        let Forward::Moved(copy) = iso.store.bring_forward(&key) else { return None };
        iso.cpu.catch_up.add(1, now_ms() - started);
        iso.counts.local_catch_ups += 1;
        Some(copy).filter(|c| decide::segment_usable(manifest, c))
    })
}

/// A copy usable under the manifest (asked for at `asked_at`) for segment `index`: at hand, or
/// loaded. None when none could be had in what is left of the manifest's freshness (the
/// lookup is forwarded).
pub(crate) async fn segment(
    config: &EdgeConfig,
    ctx: &Context,
    manifest: &Rc<Manifest>,
    asked_at: f64,
    index: u32,
) -> Option<SegmentCopy> {
    let wanted = decide::wanted(manifest, index)?;
    if let Some(copy) = at_hand(config, manifest, index) {
        return Some(copy);
    }
    let key: SegmentKey = (manifest.filter.clone(), manifest.generation, index);
    // Held but behind what the tail reaches: the journal brings it forward with the others.
    let held_behind = with_isolate(config, |iso| iso.store.peek(&key)).is_some_and(|c| catch_up::behind(manifest, &c));
    if held_behind {
        if let Some(copy) = caught_up(config, manifest, asked_at, &key).await {
            return Some(copy);
        }
    }
    once(
        config,
        |iso| &mut iso.segment_flights,
        (key.clone(), wanted),
        || load_and_keep(config, ctx, manifest, asked_at, key.clone()),
    )
    .await
}

/// Brings the filter's copies up to the manifest's head through the journal, then the copy of
/// `key` if it is now usable.
async fn caught_up(
    config: &EdgeConfig,
    manifest: &Rc<Manifest>,
    asked_at: f64,
    key: &SegmentKey,
) -> Option<SegmentCopy> {
    journal_sync::catch_up(config, manifest, asked_at).await;
    with_isolate(config, |iso| iso.store.peek(key)).filter(|c| decide::segment_usable(manifest, c))
}

/// Loads a usable copy and keeps it: from the Cache API (brought forward if it is behind), else
/// from the origin, then also put in the Cache API after the answer.
async fn load_and_keep(
    config: &EdgeConfig,
    ctx: &Context,
    manifest: &Rc<Manifest>,
    asked_at: f64,
    key: SegmentKey,
) -> Option<SegmentCopy> {
    if config.cache_api {
        if let Some(cached) = from_cache(config, manifest, key.2).await {
            if let Some(copy) = use_cached(config, ctx, manifest, asked_at, &key, cached).await {
                return Some(copy);
            }
        }
    }
    let copy = from_origin(config, manifest, asked_at, key.2).await?;
    keep(config, &key, &copy);
    if config.cache_api {
        let url = cache_copy::segment_cache_url(manifest, key.2, copy.segment().header().version);
        with_isolate(config, |iso| iso.counts.cache_puts += 1);
        put_later(config, ctx, url, &copy);
    }
    Some(copy)
}

/// A copy from the Cache API made usable: as it is, or brought forward (from the tail, else by
/// a catch-up) and then written back if it was old.
async fn use_cached(
    config: &EdgeConfig,
    ctx: &Context,
    manifest: &Rc<Manifest>,
    asked_at: f64,
    key: &SegmentKey,
    cached: SegmentCopy,
) -> Option<SegmentCopy> {
    if decide::segment_usable(manifest, &cached) {
        keep(config, key, &cached);
        return Some(cached);
    }
    if !catch_up::behind(manifest, &cached) {
        return None;
    }
    let was = cached.current_to();
    // Held, even behind, so that whatever brings the filter's copies forward brings it too.
    keep(config, key, &cached);
    drop(cached);
    let copy = match at_hand(config, manifest, key.2) {
        Some(copy) => copy,
        None => caught_up(config, manifest, asked_at, key).await?,
    };
    write_back_if_old(config, ctx, manifest, key.2, was, &copy);
    Some(copy)
}

/// Puts `copy` back in the Cache API if it was brought forward from far behind and the
/// isolate's write-back rate allows ([`cache_copy::worth_writing_back`]).
fn write_back_if_old(
    config: &EdgeConfig,
    ctx: &Context,
    manifest: &Manifest,
    index: u32,
    was: Option<JournalPosition>,
    copy: &SegmentCopy,
) {
    let (Some(was), Some(now)) = (was, copy.current_to()) else { return };
    if !cache_copy::worth_writing_back(was, now) {
        return;
    }
    let allowed = with_isolate(config, |iso| {
        let allowed = iso.write_backs.allow(now_ms());
        iso.counts.cache_write_backs += u64::from(allowed);
        allowed
    });
    if allowed {
        put_later(config, ctx, cache_copy::segment_cache_url(manifest, index, copy.segment().header().version), copy);
    }
}

/// Puts a copy in the Cache API under `url` after the answer, sealed with the isolate's entry
/// key: copied out of wasm memory now, so its buffer is not kept alive for the put.
fn put_later(config: &EdgeConfig, ctx: &Context, url: String, copy: &SegmentCopy) {
    let content = copy.segment().as_bytes();
    let header = with_isolate(config, |iso| cache_entry::seal(&iso.entry_key, &url, content));
    let entry = body::js_entry(&header, content);
    ctx.wait_until(async move {
        if let Err(e) = body::put_in_cache(&url, entry).await {
            console_error!("cache put {url}: {e}");
        }
    });
}

/// Keeps `copy` in isolate memory (the store refuses it if the copy held is further along, or
/// the filter has moved to another generation).
fn keep(config: &EdgeConfig, key: &SegmentKey, copy: &SegmentCopy) {
    with_isolate(config, |iso| iso.store.keep(key.clone(), copy.clone()));
}

/// Verifies `bytes` as a segment, timing it; None (logged) if they are not one.
fn decode(config: &EdgeConfig, bytes: Vec<u8>, what: &str) -> Option<Segment> {
    let started = now_ms();
    let decoded = Segment::decode(bytes);
    with_isolate(config, |iso| iso.cpu.segment_decode.add(1, now_ms() - started));
    decoded.map_err(|e| console_error!("{what} rejected: {e}")).ok()
}

/// A copy of segment `index` of the manifest's generation from the Cache API, its entry
/// verified ([`refused`] if it is not the edge's own); it may be behind the manifest (the
/// caller decides).
async fn from_cache(config: &EdgeConfig, manifest: &Manifest, index: u32) -> Option<SegmentCopy> {
    let url = cache_copy::wanted_cache_url(manifest, index)?;
    with_isolate(config, |iso| iso.counts.cache_reads += 1);
    let cached = Cache::default().get(url.as_str(), false).await.ok()??;
    let buffer = |len| with_isolate(config, |iso| iso.store.buffer(len));
    let (header, content) = match body::read_entry(cached, cache_copy::max_entry_content(manifest), buffer).await {
        Ok(Ok(read)) => read,
        Ok(Err(why)) => return refused(config, &url, why),
        Err(e) => {
            console_error!("cache read {url}: {e}");
            return None;
        }
    };
    let started = now_ms();
    let verified = with_isolate(config, |iso| header.verify(&iso.entry_key, &url, &content));
    // The MAC is part of verifying a segment on arrival: its time goes with the decoding's
    // (which counts the segment), and a refused entry counts as one.
    let units = u64::from(verified.is_err());
    with_isolate(config, |iso| iso.cpu.segment_decode.add(units, now_ms() - started));
    if let Err(why) = verified {
        with_isolate(config, |iso| iso.store.give_back(content));
        return refused(config, &url, why);
    }
    with_isolate(config, |iso| iso.counts.cache_hits += 1);
    let segment = decode(config, content, &url)?;
    let h = segment.header();
    if h.generation != manifest.generation || h.params != manifest.params {
        console_error!("cached segment {url} does not match the manifest: dropped");
        return None;
    }
    Some(SegmentCopy::new(segment))
}

/// An entry that is not the edge's own: counted, logged if it is the isolate's first of its
/// kind, and read as a miss.
fn refused(config: &EdgeConfig, url: &str, why: EntryRefused) -> Option<SegmentCopy> {
    let first = with_isolate(config, |iso| {
        iso.counts.cache_refused += 1;
        iso.refusals.first(&why)
    });
    if first {
        console_error!("cache entry {url} refused: {why}; read as a miss (later ones of this kind are only counted)");
    }
    None
}

/// A copy of segment `index` from the origin, usable under the manifest.
async fn from_origin(config: &EdgeConfig, manifest: &Manifest, asked_at: f64, index: u32) -> Option<SegmentCopy> {
    let url = format!("{}{}", config.origin_url, paths::segment_of(manifest, index)?);
    // A segment arriving after the manifest's freshness could not answer "no" under it.
    let budget = decide::fetch_budget_ms(asked_at, now_ms(), config.freshness_secs)?;
    let sink = Sink { max_body: None, buffer: |len| with_isolate(config, |iso| iso.store.buffer(len)) };
    let bytes = match upstream::edge_get(config, &url, budget, sink).await {
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
    with_isolate(config, |iso| {
        iso.counts.origin_segments += 1;
        iso.counts.origin_bytes += bytes.len() as u64;
    });
    let copy = SegmentCopy::new(decode(config, bytes, &url)?);
    if decide::segment_usable(manifest, &copy) {
        return Some(copy);
    }
    let h = copy.segment().header();
    console_error!(
        "segment {url} is generation {} version {} at journal {:?}: not usable for this manifest",
        h.generation,
        h.version,
        copy.current_to().map(|at| at.added)
    );
    None
}
