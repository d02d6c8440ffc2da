//! One native isolate's part for one filter: its follower of the filter's shared feed, fed by
//! fetches through the CDN from its data centre, its lookups, answered from what the follower
//! holds, and, for a sample of isolates, how soon each write reached it.

use crate::{is_no, key_hash, now_ms, Acknowledged, Counters, FleetOptions, Protocol};
use bloomgate_cdn_sim::Cdn;
use bloomgate_client::feed_token::{feed_token, CURRENT_GENERATION};
use bloomgate_client::paths;
use bloomgate_edge::feed_follow::{Follower, Next, Refused, Verdict};
use bloomgate_filter::feed_current::FeedCurrent;
use bloomgate_filter::sealed_chunk::ChunkClock;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The longest an isolate sleeps between steps: its lookups go on meanwhile.
const STEP: Duration = Duration::from_millis(20);

/// Violations kept as examples, at most.
const MAX_EXAMPLES: usize = 10;

/// One isolate.
pub(crate) struct Isolate {
    pop: usize,
    filter: String,
    secret: String,
    clock: ChunkClock,
    follower: Mutex<Follower>,
    cdn: Arc<Cdn>,
    counters: Arc<Counters>,
    options: FleetOptions,
    /// Today's protocol: when this isolate last asked the origin itself (ms), and how.
    polled_at_ms: std::sync::atomic::AtomicU64,
    http: reqwest::Client,
    /// For an isolate whose lag is measured: the filter's writes, and how far it has taken them.
    lag: Option<(Arc<Acknowledged>, Mutex<LagCursor>)>,
}

/// Where a sampled isolate is in its filter's acknowledged writes.
#[derive(Default)]
struct LagCursor {
    /// Since when (ms) its follower has followed a copy caught up with the feed (it asked for
    /// a chunk not ended yet); None before. Writes acknowledged before then came with the
    /// segments it loaded or the chunks it caught up on after a cold start: their lag is the
    /// cold start's, not the feed's, and is not counted.
    following_since: Option<u64>,
    /// The first write not yet seen in its copy.
    next: usize,
}

impl Isolate {
    pub(crate) fn new(
        index: usize,
        filter: &str,
        secret: &str,
        options: &FleetOptions,
        cdn: Arc<Cdn>,
        counters: Arc<Counters>,
    ) -> Isolate {
        let clock = ChunkClock::new(options.width_ms).unwrap_or_else(|e| panic!("{e}"));
        Isolate {
            pop: index % cdn.pops(),
            filter: filter.to_owned(),
            secret: secret.to_owned(),
            clock,
            follower: Mutex::new(cold(clock, options)),
            cdn,
            counters,
            options: options.clone(),
            polled_at_ms: Default::default(),
            http: reqwest::Client::new(),
            lag: None,
        }
    }

    /// Measures this isolate's lag on `acknowledged`, its filter's writes (None: not sampled).
    pub(crate) fn with_lag(mut self, acknowledged: Option<Arc<Acknowledged>>) -> Isolate {
        self.lag = acknowledged.map(|a| (a, Mutex::default()));
        self
    }

    /// Drops what the follower holds: the next step reads the current document again.
    fn start_cold(&self) {
        *self.follower() = cold(self.clock, &self.options);
        if let Some((_, cursor)) = &self.lag {
            cursor.lock().unwrap_or_else(|p| p.into_inner()).following_since = None;
        }
    }

    /// After an answer was taken: the lag of every write the copy now holds that it did not
    /// before, in the order they were acknowledged (a write's chunk comes no earlier than the
    /// previous write's, from one writer).
    fn measure_lag(&self) {
        let Some((acknowledged, cursor)) = &self.lag else { return };
        let now = now_ms();
        let follower = self.follower();
        let mut cursor = cursor.lock().unwrap_or_else(|p| p.into_inner());
        let Some((params, format)) = follower.keys() else {
            cursor.following_since = None;
            return;
        };
        let keys = acknowledged.keys.lock().unwrap_or_else(|p| p.into_inner());
        if cursor.following_since.is_none() {
            if !matches!(follower.next(now), Next::Wait { .. }) {
                return;
            }
            cursor.following_since = Some(now);
            cursor.next = keys.partition_point(|(_, at)| *at < now);
        }
        let mut lags = Vec::new();
        while let Some((key, at)) = keys.get(cursor.next) {
            match key_hash(key, &params, format) {
                Some(hash) if follower.holds(&hash) => lags.push(now.saturating_sub(*at)),
                _ => break,
            }
            cursor.next += 1;
        }
        drop((keys, cursor, follower));
        self.counters.lags_ms.lock().unwrap_or_else(|p| p.into_inner()).extend(lags);
    }

    fn follower(&self) -> std::sync::MutexGuard<'_, Follower> {
        self.follower.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Follows the feed and looks up by `look_up` every `lookup_every`, until `deadline`,
    /// starting cold again about every `restart_every`.
    pub(crate) async fn live(&self, deadline: tokio::time::Instant, look_up: impl Fn(&Isolate)) {
        let options = &self.options;
        self.counters.cold_starts.fetch_add(1, Ordering::Relaxed);
        let mut next_lookup = tokio::time::Instant::now();
        let mut restart_at = self.restart_after();
        while tokio::time::Instant::now() < deadline {
            let now = tokio::time::Instant::now();
            if now >= next_lookup {
                next_lookup = now + options.lookup_every;
                if options.protocol == Protocol::PerIsolate {
                    self.poll_if_stale().await;
                    tokio::time::sleep_until(next_lookup).await;
                    continue;
                }
                look_up(self);
            }
            if restart_at.is_some_and(|at| now >= at) {
                self.start_cold();
                self.counters.cold_starts.fetch_add(1, Ordering::Relaxed);
                restart_at = self.restart_after();
            }
            self.step(next_lookup).await;
        }
    }

    /// Today's protocol: a lookup that finds this isolate's copy older than S/2 asks the
    /// origin for the manifest itself (one request per refresh, as the edge's refresh is).
    async fn poll_if_stale(&self) {
        let now = now_ms();
        if now.saturating_sub(self.polled_at_ms.load(Ordering::Relaxed)) < self.options.freshness_ms / 2 {
            return;
        }
        self.polled_at_ms.store(now, Ordering::Relaxed);
        self.counters.polls.fetch_add(1, Ordering::Relaxed);
        let url = format!("{}{}", self.origin_base(), paths::manifest(&self.filter));
        let _ = self.http.get(url).header(bloomgate_client::headers::EDGE_SECRET, &self.secret).send().await;
    }

    fn origin_base(&self) -> &str {
        &self.options.origin_base
    }

    fn restart_after(&self) -> Option<tokio::time::Instant> {
        let every = self.options.restart_every;
        (!every.is_zero()).then(|| tokio::time::Instant::now() + every.mul_f64(0.5 + rand::random::<f64>()))
    }

    /// One step of the follower: what it asks for, fetched and fed back; or a wait, at most
    /// until the next lookup.
    async fn step(&self, next_lookup: tokio::time::Instant) {
        let now = now_ms();
        let next = self.follower().next(now);
        let pause = |ms: u64| {
            let until = tokio::time::Instant::now() + Duration::from_millis(ms).min(STEP);
            tokio::time::sleep_until(until.min(next_lookup.max(tokio::time::Instant::now())))
        };
        match next {
            Next::Wait { until_ms } => pause(until_ms.saturating_sub(now).max(1)).await,
            Next::Fallback => {
                // A real isolate keeps itself fresh from its own journal path meanwhile; here it
                // starts cold again.
                self.counters.fallbacks.fetch_add(1, Ordering::Relaxed);
                self.start_cold();
                pause(100).await;
            }
            Next::Current { slot } => {
                let token = feed_token(self.secret.as_bytes(), &self.filter, CURRENT_GENERATION);
                let fetched = self.fetch(&paths::feed_current(&token, &self.filter, self.clock.width_ms(), slot)).await;
                let taken = match fetched.status {
                    200 => serde_json::from_slice::<FeedCurrent>(&fetched.body)
                        .ok()
                        .filter(|current| current.filter == self.filter)
                        .is_some_and(|current| self.follower().on_current(current).is_ok()),
                    _ => false,
                };
                if !taken {
                    pause(50).await;
                }
            }
            Next::Segment { generation, epoch, index } => {
                let token = feed_token(self.secret.as_bytes(), &self.filter, generation);
                let path = paths::epoch_segment(&token, &self.filter, generation, self.clock.width_ms(), epoch, index);
                let fetched = self.fetch(&path).await;
                let taken =
                    fetched.status == 200 && self.take(|f| f.on_segment(index, &fetched.body, now_ms()).is_ok());
                if !taken {
                    self.refused(fetched.status);
                    pause(50).await;
                }
            }
            Next::Page { generation, chunk, page } => {
                let token = feed_token(self.secret.as_bytes(), &self.filter, generation);
                let path = paths::sealed_page(&token, &self.filter, generation, self.clock.width_ms(), chunk, page);
                let fetched = self.fetch(&path).await;
                let taken = fetched.status == 200 && self.take(|f| f.on_page(&fetched.body, now_ms()).is_ok());
                if !taken {
                    self.refused(fetched.status);
                    pause(25).await;
                }
            }
        }
    }

    /// `path` through this isolate's data centre, after the latency to it.
    async fn fetch(&self, path: &str) -> Arc<bloomgate_cdn_sim::Fetched> {
        tokio::time::sleep(self.options.pop_latency).await;
        self.cdn.get(self.pop, path).await
    }

    /// Feeds an answer to the follower; false (counted) if it was not what was asked for.
    fn take(&self, feed: impl FnOnce(&mut Follower) -> bool) -> bool {
        let taken = feed(&mut self.follower());
        if taken {
            self.measure_lag();
        } else {
            self.counters.rejected.fetch_add(1, Ordering::Relaxed);
        }
        taken
    }

    /// A refusal, by status, fed to the follower.
    fn refused(&self, status: u16) {
        if let Some(refused) = Refused::of_status(status) {
            self.follower().on_refused(refused);
        }
    }

    /// The follower's answer for `key` at `now_ms`; None while it follows nothing.
    pub(crate) fn verdict(&self, key: &str, now_ms: u64) -> Option<Verdict> {
        let follower = self.follower();
        let (params, format) = follower.keys()?;
        let hash = key_hash(key, &params, format)?;
        Some(follower.verdict(&hash, now_ms))
    }

    /// Counts a lookup's verdict; `written`: the key, when it was acknowledged and when the
    /// lookup started, for a key acknowledged S or more before.
    pub(crate) fn counted(&self, verdict: Verdict, written: Option<(String, u64, u64)>) {
        self.counters.lookups.fetch_add(1, Ordering::Relaxed);
        if !is_no(verdict) {
            return;
        }
        self.counters.not_seen.fetch_add(1, Ordering::Relaxed);
        if let Some((key, acknowledged_at, started)) = written {
            self.counters.violations.fetch_add(1, Ordering::Relaxed);
            let mut examples = self.counters.examples.lock().unwrap_or_else(|p| p.into_inner());
            if examples.len() < MAX_EXAMPLES {
                examples.push(format!(
                    "isolate in data centre {}: key {key} acknowledged at {acknowledged_at} answered not seen by a lookup started {} ms later",
                    self.pop,
                    started - acknowledged_at
                ));
            }
        }
    }
}

/// A follower at a cold start.
fn cold(clock: ChunkClock, options: &FleetOptions) -> Follower {
    Follower::new(clock, options.freshness_ms, options.epsilon_ms)
}
