//! Journal requests (wasm32 only): every chunk the isolate reads goes into its filter
//! generation's journal tail, and the copies held are brought forward from there (`tail`,
//! `store`). Forward requests start at the tail's head; one request back reaches the oldest
//! copy the tail does not cover (`catch_up`).
//!
//! A refresh ([`refresh`]) is one forward request per filter: a chunk that reaches the head of
//! the generation the origin still names is the next manifest (`manifest::refreshed`). A
//! catch-up ([`catch_up`]) brings the held copies up to a manifest's head, once per isolate at
//! a time, before that manifest is used or when a lookup finds its copy behind.

use crate::catch_up::{self, MAX_JOURNAL_REQUESTS};
use crate::config::EdgeConfig;
use crate::isolate::{now_ms, once, with_isolate, Isolate};
use crate::manifest;
use crate::tail::{JournalTail, Refused};
use crate::upstream::{self, Failure, Reply, Sink};
use bloomgate_client::headers;
use bloomgate_filter::{decode_journal, JournalPosition, JournalView, Manifest};
use std::rc::Rc;
use worker::console_error;

/// The successor of `old` from the journal alone, asked for now: the entries since the tail's
/// head, taken into the tail and brought to every copy held, and taken as the new manifest
/// when they reach the head of the generation the origin still names. None: ask for the
/// manifest (the copies keep what was applied, which is right for their positions).
pub(crate) async fn refresh(config: &EdgeConfig, old: &Manifest) -> Option<(Rc<Manifest>, f64)> {
    let head = old.journal?;
    let asked_at = now_ms();
    let mut from = with_isolate(config, |iso| iso.store.tail_mut(&old.filter, old.generation, old.params, head).head());
    for _ in 0..MAX_JOURNAL_REQUESTS {
        let (reply, chunk_to) = match forward(config, old, from, asked_at).await? {
            Ok(step) => step,
            Err(()) => return None,
        };
        let header = |name: &str| reply.headers.get(name).ok().flatten().and_then(|v| v.trim().parse::<u64>().ok());
        let (head, readable) = (header(headers::JOURNAL_HEAD), header(headers::READABLE_GENERATION));
        if let Some(next) = manifest::refreshed(old, chunk_to, head, readable) {
            return Some((Rc::new(next), asked_at));
        }
        // Cut short of the head (a long way behind): the rest follows from where it ended.
        let more = head.is_some_and(|head| catch_up::ask_again(from, chunk_to, head));
        if readable != Some(old.generation) || !more {
            return None;
        }
        from = chunk_to;
    }
    None
}

/// Brings the copies held for the manifest's filter generation up to its journal head (or as
/// far as one bounded catch-up gets), once per isolate at a time: from the tail where it
/// reaches, else through journal requests. Nothing to do without a journal.
pub(crate) async fn catch_up(config: &EdgeConfig, manifest: &Rc<Manifest>, asked_at: f64) {
    let Some(head) = manifest.journal else {
        return;
    };
    let pending = with_isolate(config, |iso| {
        let tail = iso.store.tail_mut(&manifest.filter, manifest.generation, manifest.params, head);
        let (tail_head, base) = (tail.head(), tail.base());
        iso.counts.local_catch_ups += iso.store.bring_all_forward(&manifest.filter, manifest.generation) as u64;
        let copies = iso.store.copies_of(&manifest.filter, manifest.generation);
        let behind = copies.iter().any(|(_, c)| catch_up::behind(manifest, c));
        behind
            && (tail_head.added < head.added
                || catch_up::oldest_uncovered(base, copies.iter().map(|(_, c)| c)).is_some())
    });
    if !pending {
        return;
    }
    let key = (manifest.filter.clone(), manifest.generation, head.added);
    once(config, |iso| &mut iso.catch_up_flights, key, || run_catch_up(config, manifest, head, asked_at)).await;
}

/// At most [`MAX_JOURNAL_REQUESTS`] chunks: forward from the tail's head until it reaches
/// `head`, then back from the oldest copy the tail does not cover.
async fn run_catch_up(config: &EdgeConfig, manifest: &Manifest, head: JournalPosition, asked_at: f64) {
    for _ in 0..MAX_JOURNAL_REQUESTS {
        let (tail_head, uncovered) = with_isolate(config, |iso| {
            let copies = iso.store.copies_of(&manifest.filter, manifest.generation);
            let tail = iso.store.tail(&manifest.filter, manifest.generation);
            let base = tail.map_or(head.added, JournalTail::base);
            let behind = copies.iter().map(|(_, c)| c).filter(|c| catch_up::behind(manifest, c));
            (tail.map(JournalTail::head), catch_up::oldest_uncovered(base, behind))
        });
        let from = match (tail_head, uncovered) {
            (Some(t), _) if t.added < head.added => t,
            (_, Some(oldest)) => oldest,
            _ => return,
        };
        match forward(config, manifest, from, asked_at).await {
            Some(Ok((_, to))) if catch_up::ask_again(from, to, head.added) || uncovered.is_some() => continue,
            _ => return,
        }
    }
}

/// One journal request from `from`, within what is left of the manifest's freshness: the chunk
/// taken into the tail and brought to the copies. None: nothing could be asked (out of time);
/// `Err`: the origin did not answer with a chunk (copies it cannot bring forward are dropped).
async fn forward(
    config: &EdgeConfig,
    manifest: &Manifest,
    from: JournalPosition,
    asked_at: f64,
) -> Option<Result<(Reply, JournalPosition), ()>> {
    // Entries arriving after the manifest's freshness would bring copies up to a head that no
    // longer counts; the next manifest will ask again.
    let budget = crate::decide::fetch_budget_ms(asked_at, now_ms(), config.freshness_secs)?;
    let url = catch_up::journal_url(&config.origin_url, &manifest.filter, manifest.generation, from);
    let held_bytes = with_isolate(config, |iso| {
        iso.store.copies_of(&manifest.filter, manifest.generation).iter().map(|(_, c)| c.bytes()).sum::<usize>()
    });
    let sink = Sink { max_body: Some(catch_up::chunk_byte_limit(held_bytes)), buffer: Vec::with_capacity };
    let reply = match upstream::edge_get(config, &url, budget, sink).await {
        Ok(r) if r.status == 200 => r,
        Ok(r) if r.status == 410 => {
            // The entries after `from` are no longer kept: copies at or before it are fetched
            // whole when needed, and a tail that reaches `from` can never be extended forward
            // again (a new one starts at the next manifest's head).
            drop_where(config, manifest, |at| catch_up::gone(from, at));
            with_isolate(config, |iso| {
                let (filter, generation) = (&manifest.filter, manifest.generation);
                if iso.store.tail(filter, generation).is_some_and(|t| t.covers(from.added)) {
                    iso.store.drop_tail(filter, generation);
                }
            });
            return Some(Err(()));
        }
        Err(Failure::TooLarge(limit)) => {
            // More bytes than the copies it would bring forward: fetching those whole, when
            // needed, costs less.
            console_error!("journal {url}: over {limit} bytes; dropping the copies it would bring forward");
            drop_where(config, manifest, |at| at.is_none_or(|at| at.added <= from.added));
            return Some(Err(()));
        }
        // 404 (filter or generation gone), 5xx, timeouts: the manifest says what is true now.
        Ok(r) => {
            console_error!("journal {url}: origin answered {}", r.status);
            return Some(Err(()));
        }
        Err(e) => {
            console_error!("journal {url}: {e}");
            return Some(Err(()));
        }
    };
    let to = match decode_journal(&reply.body) {
        Ok(chunk) if chunk.generation == manifest.generation && chunk.from == from.added => {
            with_isolate(config, |iso| take_chunk(iso, manifest, from, &chunk, reply.body.len()))
        }
        Ok(_) => return Some(Err(())),
        Err(e) => {
            console_error!("journal {url} rejected: {e}");
            return Some(Err(()));
        }
    };
    Some(Ok((reply, to)))
}

/// Takes a verified chunk, asked for from `from`, into the tail (started at `from` if none is
/// kept) and brings every copy held forward; the chunk's end. A chunk that does not join the
/// tail (older than it reaches, and not up to it) brings the copies at its start forward
/// through a tail of its own, and goes.
fn take_chunk(
    iso: &mut Isolate,
    manifest: &Manifest,
    from: JournalPosition,
    chunk: &JournalView<'_>,
    bytes: usize,
) -> JournalPosition {
    let started = now_ms();
    iso.counts.origin_journal += 1;
    iso.counts.origin_bytes += bytes as u64;
    let (filter, generation) = (manifest.filter.as_str(), manifest.generation);
    let moved = match iso.store.tail_mut(filter, generation, manifest.params, from).add(chunk) {
        Ok(()) => {
            iso.store.tails_grew();
            iso.store.bring_all_forward(filter, generation)
        }
        Err(Refused::Gap) => {
            let mut own = JournalTail::at(generation, manifest.params, from);
            match own.add(chunk) {
                Ok(()) => iso.store.bring_all_forward_through(&own, filter, generation),
                Err(_) => 0,
            }
        }
        Err(Refused::WrongFilter) => 0,
    };
    iso.counts.local_catch_ups += moved as u64;
    iso.cpu.catch_up.add(1, now_ms() - started);
    chunk.to
}

/// Drops the copies of the manifest's filter generation whose position `doomed` picks.
fn drop_where(config: &EdgeConfig, manifest: &Manifest, doomed: impl Fn(Option<JournalPosition>) -> bool) {
    with_isolate(config, |iso| {
        for (key, copy) in iso.store.copies_of(&manifest.filter, manifest.generation) {
            if doomed(copy.current_to()) {
                iso.store.remove(&key);
            }
        }
    });
}
