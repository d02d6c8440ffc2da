//! Filter definitions, cached so lookups do not read the database, with a bound on what a
//! stream of requests for made-up filter names can cost: the cache holds only filters that
//! exist, and an unknown name costs at most one listing of all filters per refresh interval,
//! shared by every request that asks meanwhile, never one database read per name.

use crate::store::{Database, DatabaseError, FilterDef};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What the cache knows about one name right now.
#[derive(Clone, Debug, PartialEq)]
pub enum Cached {
    /// A definition read within the refresh interval.
    Fresh(Arc<FilterDef>),
    /// A definition read longer ago, told to one caller, which reads it again (usable if the
    /// database cannot be asked); everyone else is told `Fresh` with it meanwhile.
    Stale(Arc<FilterDef>),
    /// Not among the filters listed within the refresh interval.
    Unknown,
    /// Nothing known within the interval: ask the database.
    Ask,
}

#[derive(Default)]
struct Entries {
    defs: HashMap<String, (Arc<FilterDef>, Instant)>,
    listed_at: Option<Instant>,
}

/// The cache of definitions.
pub struct DefCache {
    entries: Mutex<Entries>,
    listing: tokio::sync::Mutex<()>,
    refresh: Duration,
}

impl DefCache {
    /// A cache whose entries and listings are trusted for `refresh`.
    pub fn new(refresh: Duration) -> DefCache {
        DefCache { entries: Mutex::default(), listing: tokio::sync::Mutex::new(()), refresh }
    }

    fn entries(&self) -> std::sync::MutexGuard<'_, Entries> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// What is known about `name` at `now` (see [`Cached`]). The first caller to find a
    /// definition stale re-stamps it with `now` and is told `Stale`, so exactly one lookup per
    /// refresh interval reads the database and the others carry on with the definition they had:
    /// without that, every lookup arriving during the read would wait for a read of its own.
    pub fn lookup(&self, name: &str, now: Instant) -> Cached {
        let mut entries = self.entries();
        let listed_recently = entries.listed_at.is_some_and(|at| now.duration_since(at) < self.refresh);
        match entries.defs.get_mut(name) {
            Some((def, at)) if now.duration_since(*at) < self.refresh => Cached::Fresh(def.clone()),
            Some((def, at)) => {
                *at = now;
                Cached::Stale(def.clone())
            }
            None if listed_recently => Cached::Unknown,
            None => Cached::Ask,
        }
    }

    /// Records a definition just read or written.
    pub fn insert(&self, def: FilterDef) -> Arc<FilterDef> {
        let def = Arc::new(def);
        self.entries().defs.insert(def.name.clone(), (def.clone(), Instant::now()));
        def
    }

    /// Forgets a name (its definition changed).
    pub fn forget(&self, name: &str) {
        self.entries().defs.remove(name);
    }

    /// The definition of `name`, or None if no such filter exists, asking the database as
    /// little as the module doc promises. A known definition outlives a key-store outage, so
    /// the filter keeps answering "no" meanwhile.
    pub async fn get(&self, keys: &dyn Database, name: &str) -> Result<Option<Arc<FilterDef>>, DatabaseError> {
        match self.lookup(name, Instant::now()) {
            Cached::Fresh(def) => Ok(Some(def)),
            Cached::Unknown => Ok(None),
            Cached::Stale(def) => match keys.filter(name).await {
                Ok(Some(fresh)) => Ok(Some(self.insert(fresh))),
                Ok(None) => {
                    self.forget(name);
                    Ok(None)
                }
                Err(_) => Ok(Some(def)),
            },
            Cached::Ask => {
                // One listing at a time; whoever waited finds it done.
                let _one = self.listing.lock().await;
                if let Cached::Ask = self.lookup(name, Instant::now()) {
                    let all = keys.filters().await?;
                    let now = Instant::now();
                    let mut entries = self.entries();
                    for def in all {
                        entries.defs.insert(def.name.clone(), (Arc::new(def), now));
                    }
                    entries.listed_at = Some(now);
                }
                Ok(match self.lookup(name, Instant::now()) {
                    Cached::Fresh(def) | Cached::Stale(def) => Some(def),
                    Cached::Unknown | Cached::Ask => None,
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bloomgate_filter::KeyFormat;

    fn def(name: &str) -> FilterDef {
        FilterDef {
            name: name.into(),
            key_format: KeyFormat::SHA256_HEX,
            capacity: 10,
            fp_rate: 0.01,
            segment_bytes: 64,
        }
    }

    #[test]
    fn unknown_names_are_answered_from_the_last_listing_until_it_ages() {
        let cache = DefCache::new(Duration::from_secs(1));
        let t0 = Instant::now();
        assert_eq!(cache.lookup("nope", t0), Cached::Ask, "nothing listed yet");
        cache.entries().listed_at = Some(t0);
        assert_eq!(cache.lookup("nope", t0 + Duration::from_millis(500)), Cached::Unknown);
        assert_eq!(cache.lookup("nope", t0 + Duration::from_secs(2)), Cached::Ask);
        assert!(cache.entries().defs.is_empty(), "unknown names take no memory");
    }

    #[test]
    fn known_definitions_age_into_stale_copies_not_errors() {
        let cache = DefCache::new(Duration::from_secs(1));
        cache.insert(def("f"));
        let now = Instant::now();
        assert!(matches!(cache.lookup("f", now), Cached::Fresh(_)));
        assert!(matches!(cache.lookup("f", now + Duration::from_secs(5)), Cached::Stale(_)));
        assert!(
            matches!(cache.lookup("f", now + Duration::from_secs(5)), Cached::Fresh(_)),
            "one caller refreshes a stale definition; the others keep using it meanwhile"
        );
        assert!(matches!(cache.lookup("f", now + Duration::from_secs(7)), Cached::Stale(_)));
        cache.forget("f");
        assert_eq!(cache.lookup("f", now), Cached::Ask);
    }
}
