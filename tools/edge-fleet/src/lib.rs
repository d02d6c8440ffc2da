//! A fleet of native edge isolates, each following one filter's shared feed with the edge's own
//! follower (`bloomgate_edge::feed_follow`), all through one stand-in CDN (`bloomgate_cdn_sim`)
//! in front of a live origin, while writes go to the origin at a fixed rate and every isolate
//! answers lookups at a fixed rate. What it shows: how many feed requests reach the origin as
//! isolates and data centres grow, and whether any isolate ever answered "not seen" for a key
//! acknowledged S or more before the lookup started (a violation).
//!
//! Isolates start cold at staggered moments and start cold again now and then (an isolate is
//! evicted, a new one takes its place): each such start reads the current document, which a
//! hostile cache may serve long stale, loads segments at its epoch and catches up chunk by
//! chunk, every fetch delayed by a link latency. That is where freshness counted from the wrong
//! moment shows.
//!
//! # Layout
//! - `upstream`: the origin as the CDN's upstream, over HTTP, with a link latency.
//! - `isolate`: one isolate's loop: what its follower asks for, fetched through the CDN.
//! - Here: the options, the run (writers, isolates, lookups) and its report.

mod isolate;
mod upstream;

pub use upstream::OriginUpstream;

use bloomgate_cdn_sim::{Cdn, CdnCounts, Hostile, Policy};
use bloomgate_edge::feed_follow::Verdict;
use bloomgate_filter::hash_key;
use isolate::Isolate;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How the isolates keep fresh.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    /// The shared feed, through the CDN (`bloomgate_edge::feed_follow`).
    Shared,
    /// Today's protocol, for the baseline: each isolate asks the origin itself (the edge
    /// secret in a header, `no-store`, so no cache can help) whenever a lookup finds its copy
    /// older than S/2, at most once per S/2. Only the requests are counted; lookups are not
    /// answered from a copy.
    PerIsolate,
}

/// How a fleet run goes.
#[derive(Clone, Debug)]
pub struct FleetOptions {
    /// How the isolates keep fresh.
    pub protocol: Protocol,
    /// Isolates.
    pub isolates: usize,
    /// Data centres: lower cache tiers; isolate i is in data centre i mod `pops`.
    pub pops: usize,
    /// Whether the CDN has an upper tier.
    pub upper_tier: bool,
    /// How the caches misbehave.
    pub hostile: Hostile,
    /// How long writes and lookups go on.
    pub duration: Duration,
    /// Chunk width Δ, ms.
    pub width_ms: u64,
    /// The freshness bound S, ms.
    pub freshness_ms: u64,
    /// ε: the most the origin's Redis clock may read ahead of an isolate's, ms.
    pub epsilon_ms: u64,
    /// One write to the origin every this long.
    pub write_every: Duration,
    /// One lookup by each isolate every this long.
    pub lookup_every: Duration,
    /// Delay of every request from the CDN to the origin.
    pub link_latency: Duration,
    /// Delay of every request from an isolate to its data centre's cache, hit or miss.
    pub pop_latency: Duration,
    /// Each isolate starts cold again about this often (0: never).
    pub restart_every: Duration,
    /// The origin's `http://host:port`, for today's protocol's own requests.
    pub origin_base: String,
}

/// What a fleet run did.
#[derive(Clone, Debug, Default)]
pub struct FleetReport {
    /// Writes acknowledged.
    pub writes: u64,
    /// Lookups answered by isolates.
    pub lookups: u64,
    /// Of those, answered "not seen" at the isolate.
    pub not_seen: u64,
    /// Lookups of keys acknowledged S or more before, answered "not seen": each a violation.
    pub violations: u64,
    /// Examples of violations.
    pub examples: Vec<String>,
    /// Cold starts of isolates (first starts included).
    pub cold_starts: u64,
    /// Times an isolate's follower fell back (clock bound, clock step).
    pub fallbacks: u64,
    /// Answers the follower refused (not what was asked: a hostile cache's other key).
    pub rejected: u64,
    /// What the caches did, and the requests that reached the origin.
    pub cdn: CdnCounts,
    /// Today's protocol: the isolates' own requests to the origin.
    pub per_isolate_polls: u64,
}

/// Counters every isolate adds to.
#[derive(Default)]
struct Counters {
    lookups: AtomicU64,
    not_seen: AtomicU64,
    violations: AtomicU64,
    cold_starts: AtomicU64,
    fallbacks: AtomicU64,
    rejected: AtomicU64,
    polls: AtomicU64,
    examples: Mutex<Vec<String>>,
}

/// The keys acknowledged so far, with when (the local clock, ms).
#[derive(Default)]
struct Acknowledged {
    keys: Mutex<Vec<(String, u64)>>,
}

/// Milliseconds since the Unix epoch, by this machine's clock (the clock of every isolate).
pub fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// Runs a fleet against `filter` at the origin `upstream` reaches, writing through `writer`.
/// The filter must exist and keep an insert journal.
pub async fn run(
    upstream: Arc<OriginUpstream>,
    writer: bloomgate_client::Client,
    filter: &str,
    edge_secret: &str,
    options: FleetOptions,
) -> FleetReport {
    let policy = Policy { hostile: options.hostile, ..Policy::default() };
    let cdn = Arc::new(Cdn::new(options.pops, options.upper_tier, upstream, policy));
    let counters = Arc::new(Counters::default());
    let acknowledged = Arc::new(Acknowledged::default());
    let deadline = tokio::time::Instant::now() + options.duration;

    let writes = tokio::spawn(write(writer, filter.to_owned(), options.write_every, deadline, acknowledged.clone()));
    let mut isolates = Vec::new();
    for index in 0..options.isolates {
        let isolate = Isolate::new(index, filter, edge_secret, &options, cdn.clone(), counters.clone());
        let (acknowledged, options) = (acknowledged.clone(), options.clone());
        isolates.push(tokio::spawn(async move {
            // Staggered: isolates do not all start cold at the same moment.
            tokio::time::sleep(options.lookup_every.mul_f64(rand::random::<f64>() * 10.0)).await;
            isolate.live(deadline, |isolate| look_up(isolate, &acknowledged, &options)).await;
        }));
    }
    let writes = writes.await.unwrap_or(0);
    for isolate in isolates {
        let _ = isolate.await;
    }
    let examples = counters.examples.lock().map(|e| e.clone()).unwrap_or_default();
    FleetReport {
        writes,
        lookups: counters.lookups.load(Ordering::Relaxed),
        not_seen: counters.not_seen.load(Ordering::Relaxed),
        violations: counters.violations.load(Ordering::Relaxed),
        examples,
        cold_starts: counters.cold_starts.load(Ordering::Relaxed),
        fallbacks: counters.fallbacks.load(Ordering::Relaxed),
        rejected: counters.rejected.load(Ordering::Relaxed),
        cdn: cdn.counts(),
        per_isolate_polls: counters.polls.load(Ordering::Relaxed),
    }
}

/// Writes a new key every `every` until `deadline`, recording each acknowledged one; the count.
async fn write(
    writer: bloomgate_client::Client,
    filter: String,
    every: Duration,
    deadline: tokio::time::Instant,
    acknowledged: Arc<Acknowledged>,
) -> u64 {
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut written = 0;
    while tokio::time::Instant::now() < deadline {
        ticks.tick().await;
        let key = bloomgate_tests::random_keys(1).remove(0);
        if writer.insert(&filter, &key, b"").await.is_ok() {
            let at = now_ms();
            acknowledged.keys.lock().unwrap_or_else(|p| p.into_inner()).push((key, at));
            written += 1;
        }
    }
    written
}

/// One lookup by `isolate`: of a key acknowledged at least S ago (the check) or of one never
/// written (so that "no"s are shown to happen at all), alternately.
fn look_up(isolate: &Isolate, acknowledged: &Acknowledged, options: &FleetOptions) {
    let started = now_ms();
    let written = {
        let keys = acknowledged.keys.lock().unwrap_or_else(|p| p.into_inner());
        let old_enough = keys.partition_point(|(_, at)| at + options.freshness_ms <= started);
        // The most recent of those: where a late copy would be wrong.
        (old_enough > 0 && rand::random::<bool>())
            .then(|| keys[old_enough - 1 - rand::random_range(0..old_enough.min(20))].clone())
    };
    let (key, acknowledged_at) = match written {
        Some((key, at)) => (key, Some(at)),
        None => (bloomgate_tests::random_keys(1).remove(0), None),
    };
    let Some(verdict) = isolate.verdict(&key, started) else { return };
    isolate.counted(verdict, acknowledged_at.map(|at| (key, at, started)));
}

/// A key's hash under a generation's params and key format.
pub(crate) fn key_hash(
    key: &str,
    params: &bloomgate_filter::Params,
    format: bloomgate_filter::KeyFormat,
) -> Option<bloomgate_filter::KeyHash> {
    let normalized = format.normalize(key.as_bytes()).ok()?;
    Some(hash_key(&normalized, params.seed))
}

/// Whether a verdict is "not seen".
pub(crate) fn is_no(verdict: Verdict) -> bool {
    verdict == Verdict::NotSeen
}
