//! A stand-in for a CDN's cache, for what this machine has no CDN for: measuring how many
//! requests of the edge's shared feed reach the origin as isolates and data centres grow, and
//! testing that the edge stays right when a cache misbehaves.
//!
//! `P` lower tiers (one per data centre, "PoP") and an optional upper tier (tiered caching: the
//! lower tiers' misses go to it, its misses to the origin). Every tier keys on the URL's path,
//! keeps an answer for what its `Cache-Control` allows (`public` with `max-age`; never
//! `no-store` or `private`), or for the TTL a status is given by the override (as Workers'
//! `cf.cacheTtlByStatus` does; 0: never kept), and collapses concurrent misses of one key into
//! one fetch (single flight, as a CDN's cache lock does). Counters per tier say what was hit,
//! missed and collapsed.
//!
//! Hostile modes misbehave the ways a cache can: `ServeExpired` never lets an answer expire;
//! `ServeOtherKey` answers every n-th hit with another key's answer. The edge must stay right
//! under both: freshness counted from chunks, every answer checked against what was asked.
//!
//! # Layout
//! - `tier`: one cache: entries, their expiry, single flight, counters.
//! - `policy`: what may be kept and for how long, from the answer's status and headers.
//! - Here: the tiers together, in front of an [`Upstream`].

mod policy;
mod tier;

pub use policy::{Hostile, Policy};
pub use tier::TierCounts;

use async_trait::async_trait;
use std::sync::Arc;
use tier::Tier;

/// An answer, as a cache keeps it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fetched {
    /// The status.
    pub status: u16,
    /// Its `Cache-Control`, if any.
    pub cache_control: Option<String>,
    /// Its `Retry-After`, if any.
    pub retry_after: Option<String>,
    /// The body.
    pub body: Vec<u8>,
}

/// What the caches are in front of.
#[async_trait]
pub trait Upstream: Send + Sync {
    /// The answer for `path`.
    async fn fetch(&self, path: &str) -> Arc<Fetched>;
}

/// What every tier did, summed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CdnCounts {
    /// The lower tiers together.
    pub lower: TierCounts,
    /// The upper tier (all zero without one).
    pub upper: TierCounts,
    /// Requests that reached the upstream.
    pub upstream: u64,
    /// Bytes of the bodies the upstream answered with.
    pub upstream_bytes: u64,
}

/// The caches: `P` lower tiers, an optional upper one, in front of an upstream.
pub struct Cdn {
    lower: Vec<Tier>,
    upper: Option<Tier>,
    upstream: Counted,
}

impl Cdn {
    /// `pops` lower tiers (at least one), an upper tier if `upper`, before `upstream`, all
    /// keeping answers by `policy`.
    pub fn new(pops: usize, upper: bool, upstream: Arc<dyn Upstream>, policy: Policy) -> Cdn {
        let lower = (0..pops.max(1)).map(|_| Tier::new(policy.clone())).collect();
        let upper = upper.then(|| Tier::new(policy.clone()));
        Cdn { lower, upper, upstream: Counted { upstream, count: Default::default(), bytes: Default::default() } }
    }

    /// The number of lower tiers.
    pub fn pops(&self) -> usize {
        self.lower.len()
    }

    /// `path` asked at data centre `pop` (modulo the number of them).
    pub async fn get(&self, pop: usize, path: &str) -> Arc<Fetched> {
        let lower = &self.lower[pop % self.lower.len()];
        lower
            .get(path, async {
                match &self.upper {
                    Some(upper) => upper.get(path, self.upstream.fetch(path)).await,
                    None => self.upstream.fetch(path).await,
                }
            })
            .await
    }

    /// What every tier did so far.
    pub fn counts(&self) -> CdnCounts {
        let mut lower = TierCounts::default();
        for tier in &self.lower {
            lower += tier.counts();
        }
        CdnCounts {
            lower,
            upper: self.upper.as_ref().map(Tier::counts).unwrap_or_default(),
            upstream: self.upstream.count.load(std::sync::atomic::Ordering::Relaxed),
            upstream_bytes: self.upstream.bytes.load(std::sync::atomic::Ordering::Relaxed),
        }
    }
}

/// The upstream, with its requests counted.
struct Counted {
    upstream: Arc<dyn Upstream>,
    count: std::sync::atomic::AtomicU64,
    bytes: std::sync::atomic::AtomicU64,
}

impl Counted {
    async fn fetch(&self, path: &str) -> Arc<Fetched> {
        self.count.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let fetched = self.upstream.fetch(path).await;
        self.bytes.fetch_add(fetched.body.len() as u64, std::sync::atomic::Ordering::Relaxed);
        fetched
    }
}

#[cfg(test)]
mod tests;
