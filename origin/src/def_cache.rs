//! Filter definitions, cached so lookups do not read the database, with a bound on what a
//! stream of requests for made-up filter names can cost: the cache holds only filters that
//! exist, and an unknown name is answered from a listing of all filters, never from one
//! database read per name.
//!
//! An unknown name is never answered from a listing older than the request: another origin may
//! have created the filter (and acknowledged writes to it) a moment ago, and "no such filter"
//! would then read as "not seen" to a client that only looks at the status (a HEAD, or the edge
//! relaying it). So a request for a name the cache does not hold waits for a listing *sent
//! after it arrived*. Listings run one at a time and every request that arrived before one was
//! sent shares it: however many made-up names arrive, one listing is in flight, and each request
//! waits for at most two.

use crate::read_mostly::ReadMostly;
use crate::store::{Database, DatabaseError, FilterDef};
use arc_swap::ArcSwap;
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
    /// Not held: ask for a listing sent after the request arrived.
    Ask,
}

/// One filter's definition and when it was read: replaced whole, never changed in place.
type Slot = ArcSwap<(Arc<FilterDef>, Instant)>;

/// The cache of definitions.
pub struct DefCache {
    /// A slot per filter that exists, read by every lookup without a lock (`read_mostly`).
    defs: ReadMostly<Arc<Slot>>,
    /// When the last listing that completed was sent.
    listed_at: Mutex<Option<Instant>>,
    listing: tokio::sync::Mutex<()>,
    refresh: Duration,
}

impl DefCache {
    /// A cache whose entries are trusted for `refresh`.
    pub fn new(refresh: Duration) -> DefCache {
        DefCache {
            defs: ReadMostly::default(),
            listed_at: Mutex::default(),
            listing: tokio::sync::Mutex::new(()),
            refresh,
        }
    }

    fn listed_at(&self) -> std::sync::MutexGuard<'_, Option<Instant>> {
        self.listed_at.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `read` of the definition of `name` if it is held and fresh at `now`, borrowed: the
    /// lookup's path, which needs only the key format, and clones nothing.
    pub fn read_fresh<R>(&self, name: &str, now: Instant, read: impl FnOnce(&FilterDef) -> R) -> Option<R> {
        self.defs
            .read(name, |slot| {
                let held = slot.load();
                (now.saturating_duration_since(held.1) < self.refresh).then(|| read(&held.0))
            })
            .flatten()
    }

    /// Puts `def`, read at `at`, in its slot (a new slot for a filter not held: the map is
    /// copied only then).
    fn put(&self, def: Arc<FilterDef>, at: Instant) {
        let held = Arc::new((def, at));
        if self.defs.read(&held.0.name, |slot| slot.store(held.clone())).is_none() {
            self.defs.update(|defs| hold(defs, held));
        }
    }

    /// What is known about `name` at `now` (see [`Cached`]). The first caller to find a
    /// definition stale re-stamps it with `now` and is told `Stale`, so exactly one lookup per
    /// refresh interval reads the database and the others carry on with the definition they had:
    /// without that, every lookup arriving during the read would wait for a read of its own.
    pub fn lookup(&self, name: &str, now: Instant) -> Cached {
        let found = self.defs.read(name, |slot| {
            let held = slot.load_full();
            if now.saturating_duration_since(held.1) < self.refresh {
                return Cached::Fresh(held.0.clone());
            }
            // Re-stamped only if no one else did since it was loaded: one caller is told.
            let before = slot.compare_and_swap(&held, Arc::new((held.0.clone(), now)));
            match Arc::ptr_eq(&before, &held) {
                true => Cached::Stale(held.0.clone()),
                false => Cached::Fresh(held.0.clone()),
            }
        });
        found.unwrap_or(Cached::Ask)
    }

    /// Records a definition just read or written.
    pub fn insert(&self, def: FilterDef) -> Arc<FilterDef> {
        let def = Arc::new(def);
        self.put(def.clone(), Instant::now());
        def
    }

    /// Forgets a name (its definition changed).
    pub fn forget(&self, name: &str) {
        if self.defs.read(name, |_| ()).is_some() {
            self.defs.update(|defs| defs.remove(name));
        }
    }

    /// The definition of `name`, or None if no such filter exists, asking the database as
    /// little as the module doc promises. A known definition outlives a key-store outage, so
    /// the filter keeps answering "no" meanwhile.
    pub async fn get(&self, keys: &dyn Database, name: &str) -> Result<Option<Arc<FilterDef>>, DatabaseError> {
        let arrived = Instant::now();
        match self.lookup(name, arrived) {
            Cached::Fresh(def) => Ok(Some(def)),
            Cached::Stale(def) => match keys.filter(name).await {
                Ok(Some(fresh)) => Ok(Some(self.insert(fresh))),
                Ok(None) => {
                    self.forget(name);
                    Ok(None)
                }
                // Rewritten in a format this build does not read: the definition held no longer
                // describes the filter.
                Err(e @ DatabaseError::UnknownFormat { .. }) => {
                    self.forget(name);
                    Err(e)
                }
                Err(_) => Ok(Some(def)),
            },
            Cached::Ask => match self.listed_since(keys, name, arrived).await {
                // Another filter's definition is in a format this build does not read, which
                // fails every listing: this name is read on its own instead, so one such
                // filter takes no other with it.
                Err(DatabaseError::UnknownFormat { filter, .. }) if filter != name => {
                    Ok(keys.filter(name).await?.map(|def| self.insert(def)))
                }
                listed => listed,
            },
        }
    }

    /// `name`'s definition from a listing sent at or after `arrived`: the one that completed
    /// while this caller waited its turn, or one it sends itself.
    async fn listed_since(
        &self,
        keys: &dyn Database,
        name: &str,
        arrived: Instant,
    ) -> Result<Option<Arc<FilterDef>>, DatabaseError> {
        let _one = self.listing.lock().await;
        if self.listed_at().is_none_or(|sent| sent < arrived) {
            let sent = Instant::now();
            let all = keys.filters().await?;
            // One copy of the map for the whole listing.
            self.defs.update(|defs| all.into_iter().for_each(|def| hold(defs, Arc::new((Arc::new(def), sent)))));
            *self.listed_at() = Some(sent);
        }
        Ok(self.defs.read(name, |slot| slot.load().0.clone()))
    }
}

/// Puts `held` in its filter's slot in `defs`, making the slot if there is none.
fn hold(defs: &mut HashMap<Box<str>, Arc<Slot>>, held: Arc<(Arc<FilterDef>, Instant)>) {
    match defs.get(held.0.name.as_str()) {
        Some(slot) => slot.store(held),
        None => {
            defs.insert(held.0.name.as_str().into(), Arc::new(ArcSwap::new(held)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::KeySink;
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

    /// A database that lists what a test put in it, and counts the listings; the definitions
    /// named in `newer` are in a format this build does not read.
    #[derive(Default)]
    struct Listed {
        defs: Mutex<Vec<FilterDef>>,
        newer: Mutex<Vec<String>>,
        listings: std::sync::atomic::AtomicUsize,
    }

    impl Listed {
        fn unreadable(&self, name: &str) -> Result<(), DatabaseError> {
            match self.newer.lock().unwrap().iter().any(|n| n == name) {
                true => {
                    Err(DatabaseError::UnknownFormat { filter: name.into(), record: "definition", found: 2, known: 1 })
                }
                false => Ok(()),
            }
        }
    }

    #[async_trait::async_trait]
    impl Database for Listed {
        async fn filters(&self) -> Result<Vec<FilterDef>, DatabaseError> {
            self.listings.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            tokio::task::yield_now().await;
            let first_newer = self.newer.lock().unwrap().first().cloned();
            if let Some(name) = first_newer {
                self.unreadable(&name)?;
            }
            Ok(self.defs.lock().unwrap().clone())
        }
        async fn filter(&self, name: &str) -> Result<Option<FilterDef>, DatabaseError> {
            self.unreadable(name)?;
            Ok(self.defs.lock().unwrap().iter().find(|d| d.name == name).cloned())
        }
        async fn get(&self, _: &str, _: &[u8]) -> Result<Option<Vec<u8>>, DatabaseError> {
            unreachable!()
        }
        async fn put(&self, _: &str, _: &[u8], _: &[u8]) -> Result<(), DatabaseError> {
            unreachable!()
        }
        async fn delete(&self, _: &str, _: &[u8]) -> Result<bool, DatabaseError> {
            unreachable!()
        }
        async fn scan_keys(&self, _: &str, _: usize, _: KeySink<'_>) -> Result<u64, DatabaseError> {
            unreachable!()
        }
        async fn resize_filter(&self, _: &str, _: u64, _: f64) -> Result<(), DatabaseError> {
            unreachable!()
        }
        async fn create_filter(&self, _: &FilterDef) -> Result<(FilterDef, bool), DatabaseError> {
            unreachable!()
        }
        async fn drop_filter(&self, _: &str, _: crate::store::Dropped) -> Result<bool, DatabaseError> {
            unreachable!()
        }
        async fn dropped(&self, _: &str) -> Result<Option<crate::store::Dropped>, DatabaseError> {
            unreachable!()
        }
        async fn has_keys(&self, _: &str) -> Result<bool, DatabaseError> {
            unreachable!()
        }
        async fn delete_keys(&self, _: &str, _: usize) -> Result<u64, DatabaseError> {
            unreachable!()
        }
        async fn ping(&self) -> Result<(), DatabaseError> {
            Ok(())
        }
    }

    #[tokio::test]
    async fn an_unknown_name_is_answered_from_a_listing_sent_after_it_was_asked() {
        let (cache, db) = (DefCache::new(Duration::from_secs(60)), Listed::default());
        assert_eq!(cache.get(&db, "f").await.unwrap(), None, "no such filter yet");
        // Created elsewhere a moment later: the next ask finds it, however recent the last
        // listing (another origin may have acknowledged writes to it already).
        db.defs.lock().unwrap().push(def("f"));
        assert_eq!(cache.get(&db, "f").await.unwrap().map(|d| d.name.clone()), Some("f".into()));
        assert!(cache.defs.len() == 1, "only filters that exist take memory");
    }

    #[tokio::test]
    async fn a_definition_in_a_newer_format_is_refused_and_takes_no_other_filter_with_it() {
        let (cache, db) = (DefCache::new(Duration::from_millis(1)), Listed::default());
        db.defs.lock().unwrap().extend([def("old"), def("held")]);
        assert!(cache.get(&db, "held").await.unwrap().is_some());
        db.newer.lock().unwrap().push("new".into());
        let refused = cache.get(&db, "new").await;
        assert!(matches!(refused, Err(DatabaseError::UnknownFormat { .. })), "refused, not \"no such filter\"");
        assert_eq!(cache.get(&db, "old").await.unwrap().map(|d| d.name.clone()), Some("old".into()));
        assert_eq!(cache.get(&db, "made-up").await.unwrap(), None, "a name that does not exist still reads as none");
        // A held definition rewritten in a newer format is dropped, not used on.
        db.newer.lock().unwrap().push("held".into());
        tokio::time::sleep(Duration::from_millis(5)).await;
        assert!(matches!(cache.get(&db, "held").await, Err(DatabaseError::UnknownFormat { .. })));
        assert!(cache.defs.read("held", |_| ()).is_none());
    }

    #[tokio::test]
    async fn made_up_names_share_listings() {
        let (cache, db) = (DefCache::new(Duration::from_secs(60)), Listed::default());
        let asks = (0..200).map(|i| {
            let (cache, db) = (&cache, &db);
            async move { cache.get(db, &format!("made-up-{i}")).await.unwrap() }
        });
        let answers = futures::future::join_all(asks).await;
        assert!(answers.iter().all(Option::is_none));
        let listings = db.listings.load(std::sync::atomic::Ordering::SeqCst);
        assert!(listings <= 2, "{listings} listings for 200 names asked at once: one is in flight at a time, shared");
        assert!(cache.defs.len() == 0, "unknown names take no memory");
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
