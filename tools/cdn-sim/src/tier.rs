//! One cache tier: answers by path with their expiry, one fetch at a time per path (the others
//! wait for it), and what it did.

use crate::policy::{Hostile, Policy};
use crate::Fetched;
use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::OnceCell;
use tokio::time::Instant;

/// What a tier did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TierCounts {
    /// Requests it answered.
    pub requests: u64,
    /// Answered from what it kept.
    pub hits: u64,
    /// Fetched through it (one per flight).
    pub misses: u64,
    /// Answered by waiting on another request's fetch.
    pub collapsed: u64,
    /// Answers it kept.
    pub stored: u64,
    /// Hits answered with another key's answer (hostile).
    pub other_key: u64,
}

impl std::ops::AddAssign for TierCounts {
    fn add_assign(&mut self, o: TierCounts) {
        self.requests += o.requests;
        self.hits += o.hits;
        self.misses += o.misses;
        self.collapsed += o.collapsed;
        self.stored += o.stored;
        self.other_key += o.other_key;
    }
}

struct Entry {
    fetched: Arc<Fetched>,
    expires: Instant,
}

type Flight = Arc<OnceCell<Arc<Fetched>>>;

/// One cache.
pub(crate) struct Tier {
    policy: Policy,
    entries: Mutex<HashMap<String, Entry>>,
    flights: Mutex<HashMap<String, Flight>>,
    counts: [AtomicU64; 6],
}

const REQUESTS: usize = 0;
const HITS: usize = 1;
const MISSES: usize = 2;
const COLLAPSED: usize = 3;
const STORED: usize = 4;
const OTHER_KEY: usize = 5;

impl Tier {
    pub(crate) fn new(policy: Policy) -> Tier {
        Tier { policy, entries: Mutex::default(), flights: Mutex::default(), counts: Default::default() }
    }

    fn count(&self, which: usize) -> u64 {
        self.counts[which].fetch_add(1, Ordering::Relaxed) + 1
    }

    /// `path` from what the tier keeps, else from `fill` (one at a time per path).
    pub(crate) async fn get(&self, path: &str, fill: impl Future<Output = Arc<Fetched>>) -> Arc<Fetched> {
        self.count(REQUESTS);
        if let Some(kept) = self.kept(path) {
            self.count(HITS);
            return kept;
        }
        let (flight, first) = {
            let mut flights = self.flights.lock().unwrap_or_else(|p| p.into_inner());
            match flights.get(path) {
                Some(flight) => (flight.clone(), false),
                None => {
                    let flight = Flight::default();
                    flights.insert(path.to_owned(), flight.clone());
                    (flight, true)
                }
            }
        };
        if !first {
            self.count(COLLAPSED);
            // The first request's fill: if it was dropped unfinished, this one fills instead.
            let fetched = flight.get_or_init(|| fill).await.clone();
            self.land(path, &flight);
            return fetched;
        }
        self.count(MISSES);
        let fetched = flight.get_or_init(|| fill).await.clone();
        if let Some(ttl) = self.policy.keep_for(&fetched) {
            let entry = Entry { fetched: fetched.clone(), expires: Instant::now() + ttl };
            self.entries.lock().unwrap_or_else(|p| p.into_inner()).insert(path.to_owned(), entry);
            self.count(STORED);
        }
        self.land(path, &flight);
        fetched
    }

    /// Ends `flight`: the next miss of `path` fetches anew.
    fn land(&self, path: &str, flight: &Flight) {
        let mut flights = self.flights.lock().unwrap_or_else(|p| p.into_inner());
        if flights.get(path).is_some_and(|f| Arc::ptr_eq(f, flight)) {
            flights.remove(path);
        }
    }

    /// The answer kept for `path`, if fresh (or, hostile, whatever is kept).
    fn kept(&self, path: &str) -> Option<Arc<Fetched>> {
        let entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        let entry = entries.get(path)?;
        let fresh = entry.expires > Instant::now() || self.policy.hostile == Hostile::ServeExpired;
        if !fresh {
            return None;
        }
        if let Hostile::ServeOtherKey { every } = self.policy.hostile {
            let hits = self.counts[HITS].load(Ordering::Relaxed) + 1;
            if every > 0 && hits.is_multiple_of(every) {
                if let Some((_, other)) = entries.iter().find(|(key, _)| key.as_str() != path) {
                    self.count(OTHER_KEY);
                    return Some(other.fetched.clone());
                }
            }
        }
        Some(entry.fetched.clone())
    }

    pub(crate) fn counts(&self) -> TierCounts {
        let c = |i: usize| self.counts[i].load(Ordering::Relaxed);
        TierCounts {
            requests: c(REQUESTS),
            hits: c(HITS),
            misses: c(MISSES),
            collapsed: c(COLLAPSED),
            stored: c(STORED),
            other_key: c(OTHER_KEY),
        }
    }
}
