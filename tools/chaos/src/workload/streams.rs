//! The workload's streams: each paced at its rate, each operation spawned under the in-flight
//! cap; and the bulk writes the fault steps ask for (preload). The delete streams are in
//! [`deletes`](super::deletes).

use super::Workload;
use crate::history::{Target, Why};
use crate::keys::KeyId;
use rand::Rng;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

impl Workload {
    /// One write, its read through another origin, and its edge read S later.
    async fn write_and_follow(self: Arc<Self>) {
        let key = KeyId::written(self.next_written.fetch_add(1, Ordering::Relaxed));
        self.write_and_read_back(key, Why::Write, Why::ReadAfterWrite).await;
    }

    /// Writes `key` through a random origin; once that is acknowledged, remembers it for random
    /// lookups and reads it back through another origin at once and through the edge S later.
    pub(super) async fn write_and_read_back(self: &Arc<Self>, key: KeyId, write: Why, read: Why) {
        let via = self.random_origin();
        if !self.write(via, key, write).await {
            return;
        }
        self.remember(&[key]);
        self.lookup(self.other_origin(via), key, read).await;
        self.follow_at_edge(vec![key]);
    }

    /// Schedules a read of `keys` through the edge S (plus up to half a second) from now.
    fn follow_at_edge(self: &Arc<Self>, keys: Vec<KeyId>) {
        if self.endpoints.edge.is_none() {
            return;
        }
        let jitter = Duration::from_millis(self.with(|s| s.rng.random_range(0..500)));
        let this = self.clone();
        let wait = self.settings.freshness + jitter;
        tokio::spawn(async move {
            tokio::time::sleep(wait).await;
            if this.stopped.load(Ordering::SeqCst) {
                return;
            }
            this.spawn(Target::Edge, |w| async move {
                if keys.len() == 1 {
                    w.lookup(Target::Edge, keys[0], Why::EdgeAfterFreshness).await;
                } else {
                    w.lookup_batch(Target::Edge, keys, Why::EdgeAfterFreshness).await;
                }
            });
        });
    }

    async fn batch_and_follow(self: Arc<Self>) {
        let first = self.next_written.fetch_add(self.settings.batch_write_keys as u32, Ordering::Relaxed);
        let keys: Vec<KeyId> = (first..first + self.settings.batch_write_keys as u32).map(KeyId::written).collect();
        let via = self.random_origin();
        if !self.write_batch(via, keys.clone(), Why::Write).await {
            return;
        }
        self.remember(&keys);
        self.lookup_batch(self.other_origin(via), keys.clone(), Why::ReadAfterWrite).await;
        self.follow_at_edge(keys);
    }

    async fn random_batch_lookup(self: Arc<Self>, edge: bool) {
        let keys: Vec<KeyId> = (0..self.settings.batch_lookup_keys).map(|_| self.random_key()).collect();
        let target = if edge { Target::Edge } else { self.random_origin() };
        self.lookup_batch(target, keys, Why::Random).await;
    }

    /// Writes keys in batches through random origins until `n` more are acknowledged (the
    /// start of the run: past the filter's small capacity). Gives up after `limit`.
    pub async fn preload(&self, n: usize, limit: Duration) -> usize {
        let started = Instant::now();
        let mut stored = 0;
        while stored < n && started.elapsed() < limit {
            let first = self.next_written.fetch_add(500, Ordering::Relaxed);
            let keys: Vec<KeyId> = (first..first + 500).map(KeyId::written).collect();
            if self.write_batch(self.random_origin(), keys.clone(), Why::Preload).await {
                self.remember(&keys);
                stored += keys.len();
            } else {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
        stored
    }

    /// A lookup of a random key through a random origin or the edge (a burst's while one is on).
    async fn random_lookup(self: Arc<Self>, to_edge: bool) {
        let target = if to_edge { Target::Edge } else { self.random_origin() };
        let key = self.random_key();
        let why = if self.burst.load(Ordering::Relaxed) > 1 { Why::Burst } else { Why::Random };
        self.lookup(target, key, why).await;
    }

    /// Runs every stream until [`stop`](Self::stop).
    pub async fn run(self: Arc<Self>) {
        let s = self.settings.clone();
        let edge = self.endpoints.edge.is_some();
        let burst = |w: &Workload| f64::from(w.burst.load(Ordering::Relaxed));
        let mut streams = tokio::task::JoinSet::new();
        let w = self.clone();
        streams.spawn(paced(
            self.clone(),
            move |_| s.write_rate,
            move || w.spawn(Target::Origin(0), Workload::write_and_follow),
        ));
        let (w, rate) = (self.clone(), s.read_rate);
        streams.spawn(paced(
            self.clone(),
            move |w| rate * burst(w),
            move || w.spawn(Target::Origin(0), |w| w.random_lookup(false)),
        ));
        if edge {
            let (w, rate) = (self.clone(), s.edge_read_rate);
            streams.spawn(paced(
                self.clone(),
                move |w| rate * burst(w),
                move || w.spawn(Target::Edge, |w| w.random_lookup(true)),
            ));
        }
        let (w, rate) = (self.clone(), s.batch_rate);
        streams.spawn(paced(
            self.clone(),
            move |_| rate,
            move || {
                w.spawn(Target::Origin(0), Workload::batch_and_follow);
                let edge = w.endpoints.edge.is_some() && w.with(|s| s.rng.random_bool(0.5));
                let to = if edge { Target::Edge } else { Target::Origin(0) };
                w.spawn(to, move |w| w.random_batch_lookup(edge));
            },
        ));
        if s.delete_rate > 0.0 {
            self.delete_streams(&mut streams, s.delete_rate);
        }
        while streams.join_next().await.is_some() {}
    }

    /// Stops the streams (they end within a tick) and waits up to `limit` for operations in
    /// flight.
    pub async fn stop(&self, limit: Duration) {
        self.stopped.store(true, Ordering::SeqCst);
        let all = self.settings.max_in_flight as u32;
        let drained = futures::future::join(self.permits[0].acquire_many(all), self.permits[1].acquire_many(all));
        let _ = tokio::time::timeout(limit, drained).await;
    }
}

/// Calls `emit` `rate(w)` times per second on average, in 10 ms steps, until the workload
/// stops. A late step does not bring a burst of catching up beyond 100 ms worth.
pub(super) async fn paced(w: Arc<Workload>, rate: impl Fn(&Workload) -> f64, mut emit: impl FnMut()) {
    let mut tick = tokio::time::interval(Duration::from_millis(10));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last = Instant::now();
    let mut budget = 0.0f64;
    while !w.stopped.load(Ordering::SeqCst) {
        tick.tick().await;
        let now = Instant::now();
        let r = rate(&w);
        budget = (budget + r * (now - last).as_secs_f64()).min(r * 0.1 + 1.0);
        last = now;
        while budget >= 1.0 {
            budget -= 1.0;
            emit();
        }
    }
}
