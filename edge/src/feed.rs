//! The shared feed in the Worker (wasm32 only; `SHARED_FEED`): a follower per filter looked up
//! (`feed_follow`), advanced by subrequests through the CDN's own cache (`fetch` with `cf`
//! options, never the per-data-centre Cache API: tiered caching and the cache lock collapse
//! every isolate's asks for one URL), in the background of the requests that find it due, one
//! run at a time per filter.
//!
//! A lookup asks the follower first: a fresh "no" is answered here, a fresh "maybe" goes to the
//! origin, and anything else (no copy yet, a copy past its bound, the follower fallen back, a
//! filter too large to hold whole) takes the isolate's own path: manifest, segments, journal,
//! freshness counted from its own ask, as without the feed.

use crate::config::{EdgeConfig, FeedSettings};
use crate::feed_follow::{fits, FeedAnswer, Follower, Next, Refused};
use crate::isolate::{lead, now_ms, with_isolate, TAKEOVER_MS};
use crate::upstream::{self, Reply};
use bloomgate_client::feed_token::{feed_token, CURRENT_GENERATION};
use bloomgate_client::paths;
use bloomgate_filter::feed_current::FeedCurrent;
use bloomgate_filter::sealed_chunk::ChunkClock;
use worker::{console_warn, Context};

/// Most filters an isolate follows; lookups of others take its own path.
const MAX_FEEDS: usize = 64;
/// Most fetches in one run: a cold start's document and segments, then chunks; the next
/// request that finds the follower due starts another.
const MAX_STEPS: usize = 256;
/// A feed subrequest's time limit, answer and body.
const FEED_TIMEOUT_MS: u32 = 5_000;
/// After a run stopped on an error, a refusal of the document or a fallback: when the next
/// may start, ms.
const RETRY_AFTER_MS: f64 = 1_000.0;
/// A follower fallen back (the clock bound failed, or a chunk was unsealable) starts cold again
/// after this long, ms, and a filter too large to hold whole is asked about again after it; the
/// isolate's own path answers meanwhile.
const FALLBACK_HOLD_MS: f64 = 60_000.0;

/// One filter's follower in the isolate.
pub(crate) struct Feed {
    follower: Follower,
    /// No run before this (isolate clock, ms).
    not_before_ms: f64,
    /// When it fell back, if it did.
    fell_back_at_ms: Option<f64>,
}

impl Feed {
    fn new(settings: FeedSettings, freshness_secs: u32) -> Feed {
        Feed { follower: cold(settings, freshness_secs), not_before_ms: 0.0, fell_back_at_ms: None }
    }

    /// Bytes it holds (counted against the isolate's budget).
    pub(crate) fn held_bytes(&self) -> usize {
        self.follower.held_bytes()
    }
}

fn cold(settings: FeedSettings, freshness_secs: u32) -> Follower {
    let clock = ChunkClock::new(settings.chunk_ms).unwrap_or_else(|e| panic!("checked by the config: {e}"));
    Follower::new(clock, u64::from(freshness_secs) * 1000, settings.clock_bound_ms)
}

/// What the feed says of `key` in `filter` now; starts a run in the background when the
/// follower has something to fetch. A follower is made only for a filter the isolate holds a
/// manifest of (one the origin named: the first lookups take the own path anyway while a
/// follower loads), and for at most [`MAX_FEEDS`]: filter names come from the public, and
/// each follower is state and subrequests.
pub(crate) fn answer(
    config: &EdgeConfig,
    settings: FeedSettings,
    ctx: &Context,
    filter: &str,
    key: &[u8],
) -> FeedAnswer {
    let now = now_ms();
    let (answer, due) = with_isolate(config, |iso| {
        if !iso.feeds.contains_key(filter) {
            if !iso.manifests.contains_key(filter) || iso.feeds.len() >= MAX_FEEDS {
                return (FeedAnswer::Unknown, false);
            }
            iso.feeds.insert(filter.to_owned(), Feed::new(settings, config.freshness_secs));
        }
        let Some(feed) = iso.feeds.get_mut(filter) else { return (FeedAnswer::Unknown, false) };
        if feed.fell_back_at_ms.is_some_and(|at| now - at >= FALLBACK_HOLD_MS) {
            (feed.follower, feed.fell_back_at_ms) = (cold(settings, config.freshness_secs), None);
        }
        let next = feed.follower.next(now as u64);
        if next == Next::Fallback && feed.fell_back_at_ms.is_none() {
            feed.fell_back_at_ms = Some(now);
            iso.counts.feed_fallbacks += 1;
            console_warn!("shared feed of {filter}: fell back to the isolate's own path (clock bound or clock step)");
        }
        let due = now >= feed.not_before_ms && !matches!(next, Next::Wait { .. } | Next::Fallback);
        (feed.follower.answer(key, now as u64), due)
    });
    if due {
        start_run(config, settings, ctx, filter);
    }
    answer
}

/// Runs the follower of `filter` in this request's `wait_until`, unless a run is under way.
fn start_run(config: &EdgeConfig, settings: FeedSettings, ctx: &Context, filter: &str) {
    let key = filter.to_owned();
    let Some(id) = with_isolate(config, |iso| iso.feed_flights.lead_if_idle(&key, now_ms(), TAKEOVER_MS)) else {
        return;
    };
    let config = config.clone();
    ctx.wait_until(async move {
        let steps = run(config.clone(), settings, key.clone());
        lead(&config, |iso| &mut iso.feed_flights, key, id, steps).await;
    });
}

/// How a step ended.
enum Step {
    /// Taken: go on.
    Taken,
    /// Nothing to do now (a wait, a chunk not sealed yet).
    Idle,
    /// An error, a refusal or a fallback: stop, and start no run for a while.
    Stopped,
}

/// Steps the follower until it waits, fails, or [`MAX_STEPS`] were taken.
async fn run(config: EdgeConfig, settings: FeedSettings, filter: String) {
    for _ in 0..MAX_STEPS {
        match step(&config, settings, &filter).await {
            Step::Taken => continue,
            Step::Idle => break,
            Step::Stopped => {
                with_isolate(&config, |iso| {
                    if let Some(feed) = iso.feeds.get_mut(&filter) {
                        feed.not_before_ms = feed.not_before_ms.max(now_ms() + RETRY_AFTER_MS);
                    }
                });
                break;
            }
        }
    }
    with_isolate(&config, crate::isolate::reserve_held);
}

/// One fetch of what the follower asks for, fed back.
async fn step(config: &EdgeConfig, settings: FeedSettings, filter: &str) -> Step {
    let now = now_ms() as u64;
    let Some(next) = with_isolate(config, |iso| iso.feeds.get(filter).map(|f| f.follower.next(now))) else {
        return Step::Idle;
    };
    let secret = config.edge_secret.as_bytes();
    let width = settings.chunk_ms;
    let path = match next {
        // A fallback is counted and held by the next lookup (`answer`).
        Next::Wait { .. } | Next::Fallback => return Step::Idle,
        Next::Current { slot } => {
            paths::feed_current(&feed_token(secret, filter, CURRENT_GENERATION), filter, width, slot)
        }
        Next::Segment { generation, epoch, index } => {
            paths::epoch_segment(&feed_token(secret, filter, generation), filter, generation, width, epoch, index)
        }
        Next::Page { generation, chunk, page } => {
            paths::sealed_page(&feed_token(secret, filter, generation), filter, generation, width, chunk, page)
        }
    };
    let url = format!("{}{path}", config.origin_url);
    let reply = match upstream::feed_get(&url, FEED_TIMEOUT_MS).await {
        Ok(reply) => reply,
        Err(e) => {
            worker::console_error!("shared feed {url}: {e}");
            return Step::Stopped;
        }
    };
    with_isolate(config, |iso| {
        iso.counts.feed_requests += 1;
        iso.counts.origin_bytes += reply.body.len() as u64;
    });
    take(config, filter, next, reply)
}

/// Feeds `reply` (to what `next` asked) to the follower.
fn take(config: &EdgeConfig, filter: &str, next: Next, reply: Reply) -> Step {
    let received = now_ms() as u64;
    with_isolate(config, |iso| {
        let budget = iso.store.budget();
        let others: usize = iso.feeds.iter().filter(|(f, _)| *f != filter).map(|(_, feed)| feed.held_bytes()).sum();
        let Some(feed) = iso.feeds.get_mut(filter) else { return Step::Stopped };
        if reply.status != 200 {
            return match (next, Refused::of_status(reply.status)) {
                (Next::Page { .. }, Some(Refused::NotYet)) => Step::Idle,
                (Next::Page { .. } | Next::Segment { .. }, Some(refused)) => {
                    feed.follower.on_refused(refused);
                    Step::Stopped
                }
                _ => Step::Stopped,
            };
        }
        let taken = match next {
            Next::Current { .. } => match serde_json::from_slice::<FeedCurrent>(&reply.body) {
                // Another filter's document (a cache answering with another URL's body).
                Ok(current) if current.filter != filter => {
                    Err(crate::feed_follow::Rejected::Unexpected(format!("the document of {:?}", current.filter)))
                }
                Ok(current) if !fits(current.params.total_bytes(), others, budget) => {
                    console_warn!(
                        "shared feed of {filter}: its bits do not fit the budget; the isolate's own path serves it"
                    );
                    feed.not_before_ms = now_ms() + FALLBACK_HOLD_MS;
                    return Step::Stopped;
                }
                Ok(current) => feed.follower.on_current(current),
                Err(e) => Err(crate::feed_follow::Rejected::Unexpected(e.to_string())),
            },
            Next::Segment { index, .. } => feed.follower.on_segment(index, &reply.body, received),
            Next::Page { .. } => feed.follower.on_page(&reply.body, received),
            Next::Wait { .. } | Next::Fallback => return Step::Idle,
        };
        match taken {
            Ok(()) => Step::Taken,
            Err(why) => {
                worker::console_error!("shared feed of {filter}: an answer not taken: {why:?}");
                Step::Stopped
            }
        }
    })
}
