//! A fleet of native edge isolates, each following the shared feed of every filter with the
//! edge's own follower (`bloomgate_edge::feed_follow`), all through one stand-in CDN
//! (`bloomgate_cdn_sim`) in front of a live origin, while writes go to the origin at a fixed
//! rate (spread over the filters) and every isolate answers lookups at a fixed rate. What it
//! shows: how many feed requests reach the origin as isolates, data centres and filters grow,
//! whether any isolate ever answered "not seen" for a key acknowledged S or more before the
//! lookup started (a violation), and how soon a write reaches the isolates (the lag, measured
//! on a sample of them).
//!
//! Isolates start cold at staggered moments and start cold again now and then (an isolate is
//! evicted, a new one takes its place): each such start reads the current document, which a
//! hostile cache may serve long stale, loads segments at its epoch and catches up chunk by
//! chunk, every fetch delayed by a link latency. That is where freshness counted from the wrong
//! moment shows.
//!
//! # Layout
//! - `upstream`: the origin as the CDN's upstream, over HTTP, with a link latency.
//! - `isolate`: one isolate's loop for one filter: what its follower asks for, fetched through
//!   the CDN, and the lag of each write it takes.
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
    /// Freshness lag, ms: from a write's acknowledgement to the moment a sampled isolate's copy
    /// held it, for writes acknowledged while that isolate followed its filter caught up (not
    /// while it loaded or caught up after a cold start); sorted.
    pub lags_ms: Vec<u64>,
}

impl FleetReport {
    /// The `q` quantile of the lags (0 to 1); None without any.
    pub fn lag_quantile_ms(&self, q: f64) -> Option<u64> {
        let n = self.lags_ms.len();
        (n > 0).then(|| self.lags_ms[((n as f64 * q).ceil() as usize).clamp(1, n) - 1])
    }
}

/// Isolates whose lag is measured: about this many, evenly spread.
const LAG_SAMPLED_ISOLATES: usize = 50;

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
    lags_ms: Mutex<Vec<u64>>,
}

/// The keys acknowledged so far in one filter, with when (the local clock, ms), in order.
#[derive(Default)]
pub(crate) struct Acknowledged {
    keys: Mutex<Vec<(String, u64)>>,
}

/// Milliseconds since the Unix epoch, by this machine's clock (the clock of every isolate).
pub fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// Runs a fleet against `filters` at the origin `upstream` reaches, writing through `writer`.
/// The filters must exist and keep an insert journal. Each isolate follows every filter (one
/// follower each) and looks up in each in turn, so its lookups per filter are `lookup_every`
/// times the number of filters apart.
pub async fn run(
    upstream: Arc<OriginUpstream>,
    writer: bloomgate_client::Client,
    filters: &[String],
    edge_secret: &str,
    options: FleetOptions,
) -> FleetReport {
    let policy = Policy { hostile: options.hostile, ..Policy::default() };
    let cdn = Arc::new(Cdn::new(options.pops, options.upper_tier, upstream, policy));
    let counters = Arc::new(Counters::default());
    let acknowledged: Vec<Arc<Acknowledged>> = filters.iter().map(|_| Arc::default()).collect();
    let deadline = tokio::time::Instant::now() + options.duration;

    let writes = tokio::spawn(write(writer, filters.to_vec(), options.write_every, deadline, acknowledged.clone()));
    let per_filter = FleetOptions { lookup_every: options.lookup_every * filters.len() as u32, ..options.clone() };
    let lag_every = (options.isolates / LAG_SAMPLED_ISOLATES).max(1);
    let mut isolates = Vec::new();
    for index in 0..options.isolates {
        for (filter, acknowledged) in filters.iter().zip(&acknowledged) {
            let sampled = index % lag_every == 0;
            let isolate = Isolate::new(index, filter, edge_secret, &per_filter, cdn.clone(), counters.clone())
                .with_lag(sampled.then(|| acknowledged.clone()));
            let (acknowledged, options) = (acknowledged.clone(), per_filter.clone());
            // Staggered over ten of an isolate's lookups: isolates do not all start cold at the
            // same moment (by the isolate's pace, not the slower one of each filter).
            let stagger = per_filter.lookup_every.mul_f64(rand::random::<f64>() * 10.0 / filters.len() as f64);
            isolates.push(tokio::spawn(async move {
                tokio::time::sleep(stagger).await;
                isolate.live(deadline, |isolate| look_up(isolate, &acknowledged, &options)).await;
            }));
        }
    }
    let writes = writes.await.unwrap_or(0);
    for isolate in isolates {
        let _ = isolate.await;
    }
    let examples = counters.examples.lock().map(|e| e.clone()).unwrap_or_default();
    let mut lags_ms = counters.lags_ms.lock().map(|l| l.clone()).unwrap_or_default();
    lags_ms.sort_unstable();
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
        lags_ms,
    }
}

/// Writes a new key every `every` until `deadline`, to each filter in turn, recording each
/// acknowledged one; the count.
async fn write(
    writer: bloomgate_client::Client,
    filters: Vec<String>,
    every: Duration,
    deadline: tokio::time::Instant,
    acknowledged: Vec<Arc<Acknowledged>>,
) -> u64 {
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut written = 0;
    for (filter, acknowledged) in filters.iter().zip(&acknowledged).cycle() {
        if tokio::time::Instant::now() >= deadline {
            break;
        }
        ticks.tick().await;
        let key = bloomgate_tests::random_keys(1).remove(0);
        if writer.insert(filter, &key, b"").await.is_ok() {
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
