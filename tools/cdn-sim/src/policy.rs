//! What a tier may keep, and for how long: the answer's `Cache-Control` (`public` with
//! `max-age`, never `no-store` or `private`), unless its status has a TTL of its own in the
//! override, which wins whatever the headers say (as `cf.cacheTtlByStatus` does). Pure.

use crate::Fetched;
use std::collections::BTreeMap;
use std::time::Duration;

/// How a cache misbehaves.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Hostile {
    /// It does not.
    #[default]
    None,
    /// Answers never expire: every answer kept is served forever.
    ServeExpired,
    /// Every `n`-th hit is answered with another key's answer, when the tier holds another.
    ServeOtherKey {
        /// One hit in this many.
        every: u64,
    },
}

/// What every tier keeps, and how it misbehaves.
#[derive(Clone, Debug, Default)]
pub struct Policy {
    /// TTLs by status that override the headers (0: never kept).
    pub ttl_by_status: BTreeMap<u16, Duration>,
    /// How the caches misbehave.
    pub hostile: Hostile,
}

impl Policy {
    /// How long `fetched` may be kept; None: not at all.
    pub fn keep_for(&self, fetched: &Fetched) -> Option<Duration> {
        if let Some(ttl) = self.ttl_by_status.get(&fetched.status) {
            return (!ttl.is_zero()).then_some(*ttl);
        }
        let control = fetched.cache_control.as_deref()?.to_ascii_lowercase();
        let directives: Vec<&str> = control.split(',').map(str::trim).collect();
        if directives.iter().any(|d| *d == "no-store" || *d == "private" || *d == "no-cache") {
            return None;
        }
        if !directives.contains(&"public") {
            return None;
        }
        let max_age = directives.iter().find_map(|d| d.strip_prefix("max-age=")?.parse::<u64>().ok())?;
        (max_age > 0).then(|| Duration::from_secs(max_age))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(status: u16, control: Option<&str>) -> Fetched {
        Fetched { status, cache_control: control.map(str::to_owned), retry_after: None, body: Vec::new() }
    }

    #[test]
    fn headers_decide_unless_the_status_has_a_ttl_of_its_own() {
        let plain = Policy::default();
        let year = Duration::from_secs(31_536_000);
        assert_eq!(plain.keep_for(&answer(200, Some("public, max-age=31536000, immutable"))), Some(year));
        assert_eq!(plain.keep_for(&answer(200, Some("public, max-age=10"))), Some(Duration::from_secs(10)));
        assert_eq!(plain.keep_for(&answer(200, Some("no-store"))), None);
        assert_eq!(plain.keep_for(&answer(200, Some("private, max-age=60"))), None);
        assert_eq!(
            plain.keep_for(&answer(200, Some("max-age=60"))),
            None,
            "shared caches keep only public answers here"
        );
        assert_eq!(plain.keep_for(&answer(200, None)), None);
        let overriding = Policy {
            ttl_by_status: BTreeMap::from([(200, Duration::from_secs(5)), (425, Duration::ZERO)]),
            ..Policy::default()
        };
        assert_eq!(overriding.keep_for(&answer(200, Some("no-store"))), Some(Duration::from_secs(5)));
        assert_eq!(overriding.keep_for(&answer(425, Some("public, max-age=60"))), None);
    }
}
