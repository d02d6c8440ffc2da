//! Getting a manifest (wasm32 only): from isolate memory while fresh (its successor fetched in
//! the background from half its freshness on), else from the journal alone
//! (`journal_sync::refresh`), else from the origin; one fetch per isolate at a time.
//!
//! Before a new manifest is used, its filter's other generations are dropped from the store
//! and the copies held are brought up to its journal head (`journal_sync::catch_up`):
//! published first, it would make them unusable and send lookups to fetch them whole.

use crate::config::EdgeConfig;
use crate::decide;
use crate::isolate::{lead, now_ms, once, with_isolate, TAKEOVER_MS};
use crate::journal_sync;
use crate::manifest::{is_fresh, replaces, wants_refresh, ManifestFetch};
use crate::upstream::{self, any_body};
use bloomgate_client::paths;
use bloomgate_filter::Manifest;
use std::rc::Rc;
use worker::{console_error, Context};

/// The manifest without I/O, if the one held is fresh (its successor then fetched in the
/// background from half its freshness on).
pub(crate) fn at_hand(config: &EdgeConfig, ctx: &Context, filter: &str) -> Option<(Rc<Manifest>, f64)> {
    let (m, asked_at) = with_isolate(config, |iso| iso.manifests.get(filter).cloned())?;
    let now = now_ms();
    if !is_fresh(asked_at, now, config.freshness_secs) {
        return None;
    }
    if wants_refresh(asked_at, now, config.freshness_secs) {
        refresh_ahead(config, ctx, filter);
    }
    Some((m, asked_at))
}

/// The manifest: at hand, else fetched (one fetch per isolate at a time, the others wait).
pub(crate) async fn get(config: &EdgeConfig, ctx: &Context, filter: &str) -> ManifestFetch {
    if let Some((m, asked_at)) = at_hand(config, ctx, filter) {
        return ManifestFetch::Found(m, asked_at);
    }
    let outcome = once(
        config,
        |iso| &mut iso.manifest_flights,
        filter.to_owned(),
        || fetch_and_keep(config.clone(), filter.to_owned()),
    )
    .await;
    match outcome {
        // Another request's fetch that took longer than the freshness bound: not usable.
        ManifestFetch::Found(_, asked_at) if !is_fresh(asked_at, now_ms(), config.freshness_secs) => {
            ManifestFetch::Failed
        }
        outcome => outcome,
    }
}

/// Starts fetching the manifest's successor in this request's `wait_until`, unless a fetch is
/// already under way; requests keep answering from the copy in hand meanwhile.
fn refresh_ahead(config: &EdgeConfig, ctx: &Context, filter: &str) {
    let key = filter.to_owned();
    let Some(id) = with_isolate(config, |iso| iso.manifest_flights.lead_if_idle(&key, now_ms(), TAKEOVER_MS)) else {
        return;
    };
    let config = config.clone();
    ctx.wait_until(async move {
        let fetch = fetch_and_keep(config.clone(), key.clone());
        lead(&config, |iso| &mut iso.manifest_flights, key, id, fetch).await;
    });
}

/// Fetches the manifest (from the journal alone when the one held names a journal head),
/// makes its generation the filter's current one, brings the copies held up to its journal
/// head, and keeps it unless a newer one is there already.
async fn fetch_and_keep(config: EdgeConfig, filter: String) -> ManifestFetch {
    let held = with_isolate(&config, |iso| iso.manifests.get(&filter).map(|(m, _)| m.clone()));
    let refreshed = match held {
        Some(old) => journal_sync::refresh(&config, &old).await,
        None => None,
    };
    let outcome = match refreshed {
        Some((next, asked_at)) => ManifestFetch::Found(next, asked_at),
        None => from_origin(&config, &filter).await,
    };
    let ManifestFetch::Found(m, asked_at) = &outcome else {
        return outcome;
    };
    let kept_at = |iso: &crate::isolate::Isolate| iso.manifests.get(&filter).map(|(_, t)| *t);
    let newest = with_isolate(&config, |iso| {
        let newest = replaces(kept_at(iso), *asked_at);
        if newest {
            iso.store.switch_generation(&filter, m.generation);
        }
        newest
    });
    if newest {
        journal_sync::catch_up(&config, m, *asked_at).await;
        with_isolate(&config, |iso| {
            if replaces(kept_at(iso), *asked_at) {
                iso.manifests.insert(filter.clone(), (m.clone(), *asked_at));
                crate::isolate::reserve_held(iso);
            }
        });
    }
    outcome
}

async fn from_origin(config: &EdgeConfig, filter: &str) -> ManifestFetch {
    // The time is taken before asking: freshness counts from the ask, not the answer.
    let asked_at = now_ms();
    let url = format!("{}{}", config.origin_url, paths::manifest(filter));
    // A manifest arriving after S is of no use: it gets at most S (and the cap).
    let Some(budget) = decide::fetch_budget_ms(asked_at, asked_at, config.freshness_secs) else {
        return ManifestFetch::Failed;
    };
    let reply = match upstream::edge_get(config, &url, budget, any_body()).await {
        Ok(r) => r,
        Err(e) => {
            console_error!("manifest {filter}: {e}");
            return ManifestFetch::Failed;
        }
    };
    with_isolate(config, |iso| {
        iso.counts.origin_manifests += 1;
        iso.counts.origin_bytes += reply.body.len() as u64;
    });
    match reply.status {
        200 => match serde_json::from_slice::<Manifest>(&reply.body).map(|m| (m.validate(), m)) {
            Ok((Ok(()), m)) if m.filter == filter => ManifestFetch::Found(Rc::new(m), asked_at),
            // A newer origin's format, mid-upgrade: refused, never guessed at; lookups forward.
            Ok((Err(e), _)) => {
                console_error!("manifest {filter}: {e}");
                ManifestFetch::Failed
            }
            _ => {
                console_error!("manifest {filter}: unusable body");
                ManifestFetch::Failed
            }
        },
        // No such filter, in the origin's words (a problem body); a 404 from anything else at
        // ORIGIN_URL is a failure, and the lookup is forwarded (and answered 502 there).
        404 if crate::upstream::judge(&reply) == crate::answer::OriginAnswer::Relay => {
            ManifestFetch::Unknown(Rc::new(reply.body))
        }
        status => {
            console_error!("manifest {filter}: origin answered {status}");
            ManifestFetch::Failed
        }
    }
}
