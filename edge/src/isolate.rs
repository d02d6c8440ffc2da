//! The isolate's state (wasm32 only) and the one-fetch-at-a-time machinery over it.
//!
//! State lives in a thread-local (an isolate runs one thread): manifests with the time they
//! were asked for, the [`SegmentStore`] (copies, spare buffers, journal tails, within the
//! budget), the fetches in flight ([`Flights`]), so concurrent requests for the same missing
//! manifest, segment or catch-up share one subrequest without ever awaiting another request's
//! promise (workerd cancels a request that does), what the isolate reports about itself, and
//! the key its Cache API entries are authenticated with (derived once, on its first request).

use crate::cache_copy::WriteBacks;
use crate::cache_entry::EntryKey;
use crate::config::EdgeConfig;
use crate::copy::SegmentCopy;
use crate::decide::Wanted;
use crate::fleet_counts::{self, FleetCounts};
use crate::flight::{Check, Flights, Role};
use crate::manifest::ManifestFetch;
use crate::report::{GrowthLog, RefusalLog};
use crate::store::{SegmentKey, SegmentStore};
use bloomgate_client::api::{CpuSpent, IsolateCounts};
use bloomgate_filter::Manifest;
use std::cell::RefCell;
use std::collections::HashMap;
use std::future::Future;
use std::hash::Hash;
use std::rc::Rc;
use std::time::Duration;
use worker::Delay;

/// How often a request waiting on another's fetch checks back (its own timer keeps it alive).
const FOLLOW_POLL: Duration = Duration::from_millis(5);
/// A fetch this old is presumed lost with its request (cancelled): a waiting request takes over.
pub(crate) const TAKEOVER_MS: f64 = 10_000.0;

/// A catch-up's name: filter, generation, the journal head it brings copies up to.
pub(crate) type CatchUpKey = (String, u64, u64);

pub(crate) struct Isolate {
    pub manifests: HashMap<String, (Rc<Manifest>, f64)>,
    pub store: SegmentStore,
    pub segment_flights: Flights<(SegmentKey, Wanted), Option<SegmentCopy>>,
    pub manifest_flights: Flights<String, ManifestFetch>,
    pub catch_up_flights: Flights<CatchUpKey, ()>,
    /// The shared feed's followers, by filter, and their runs (`SHARED_FEED`).
    pub feeds: HashMap<String, crate::feed::Feed>,
    pub feed_flights: Flights<String, ()>,
    pub counts: IsolateCounts,
    pub cpu: CpuSpent,
    pub write_backs: WriteBacks,
    pub growth: GrowthLog,
    pub fleet: FleetCounts,
    pub fleet_feed: FleetCounts,
    pub refusals: RefusalLog,
    pub entry_key: EntryKey,
    pub started_ms: f64,
    /// A name for the isolate in its data points (random: isolates have no name of their own).
    pub id: String,
}

thread_local! {
    static ISOLATE: RefCell<Option<Isolate>> = const { RefCell::new(None) };
}

pub(crate) fn with_isolate<T>(config: &EdgeConfig, f: impl FnOnce(&mut Isolate) -> T) -> T {
    ISOLATE.with(|cell| {
        let mut slot = cell.borrow_mut();
        let isolate = slot.get_or_insert_with(|| Isolate {
            manifests: HashMap::new(),
            store: SegmentStore::new(config.max_held_bytes),
            segment_flights: Flights::default(),
            manifest_flights: Flights::default(),
            catch_up_flights: Flights::default(),
            feeds: HashMap::new(),
            feed_flights: Flights::default(),
            counts: IsolateCounts::default(),
            cpu: CpuSpent::default(),
            write_backs: WriteBacks::default(),
            growth: GrowthLog::default(),
            fleet: FleetCounts::new(&fleet_counts::COUNTS, config.fleet_point_secs, now_ms() as u64),
            fleet_feed: FleetCounts::new(&fleet_counts::FEED, config.fleet_point_secs, now_ms() as u64),
            refusals: RefusalLog::default(),
            entry_key: EntryKey::derive(&config.edge_secret),
            started_ms: now_ms(),
            id: format!("{:08x}", (js_sys::Math::random() * f64::from(u32::MAX)) as u32),
        });
        f(isolate)
    })
}

/// Counts what is held outside the store (manifests, the shared feed's copies) against its
/// budget.
pub(crate) fn reserve_held(iso: &mut Isolate) {
    let manifests: usize = iso.manifests.values().map(|(m, _)| crate::manifest::bytes_of(m)).sum();
    let feeds: usize = iso.feeds.values().map(crate::feed::Feed::held_bytes).sum();
    iso.store.reserve(manifests + feeds);
}

pub(crate) fn now_ms() -> f64 {
    js_sys::Date::now()
}

/// Which of the isolate's flight tables a fetch uses.
pub(crate) type FlightsOf<K, V> = fn(&mut Isolate) -> &mut Flights<K, V>;

/// Runs `fetch` for `key` once per isolate at a time. The first request leads: it fetches in
/// its own context. Others follow: they check back on their own timer for the leader's
/// result (plain data), and lead the next attempt if the leader went away or is late.
pub(crate) async fn once<K, V, Fut>(config: &EdgeConfig, flights: FlightsOf<K, V>, key: K, fetch: impl Fn() -> Fut) -> V
where
    K: Eq + Hash + Clone + 'static,
    V: Clone + 'static,
    Fut: Future<Output = V>,
{
    loop {
        let id = match with_isolate(config, |iso| flights(iso).join(&key, now_ms(), TAKEOVER_MS)) {
            Role::Lead(id) => return lead(config, flights, key, id, fetch()).await,
            Role::Follow(id) => id,
        };
        let mut waiting = FlightGuard { flights, key: key.clone(), id, leader: false };
        loop {
            Delay::from(FOLLOW_POLL).await;
            match with_isolate(config, |iso| flights(iso).check(&key, id, now_ms(), TAKEOVER_MS)) {
                Check::Waiting => continue,
                Check::Ready(outcome) => {
                    waiting.disarm();
                    return outcome;
                }
                Check::Gone => {
                    waiting.disarm();
                    break;
                }
            }
        }
    }
}

/// The leader's part: fetch, then post the result for the followers.
pub(crate) async fn lead<K, V>(
    config: &EdgeConfig,
    flights: FlightsOf<K, V>,
    key: K,
    id: u64,
    fetch: impl Future<Output = V>,
) -> V
where
    K: Eq + Hash + Clone + 'static,
    V: Clone + 'static,
{
    let mut leading = FlightGuard { flights, key, id, leader: true };
    let outcome = fetch.await;
    leading.disarm();
    with_isolate(config, |iso| flights(iso).finish(&leading.key, id, outcome.clone()));
    outcome
}

/// Leaves a flight when a request's future is dropped mid-wait (its request cancelled), so a
/// leader's followers do not wait out [`TAKEOVER_MS`] and a follower's place is not held.
struct FlightGuard<K: Eq + Hash + Clone + 'static, V: Clone + 'static> {
    flights: FlightsOf<K, V>,
    key: K,
    id: u64,
    leader: bool,
}

impl<K: Eq + Hash + Clone + 'static, V: Clone + 'static> FlightGuard<K, V> {
    fn disarm(&mut self) {
        self.id = 0; // flight ids start at 1
    }
}

impl<K: Eq + Hash + Clone + 'static, V: Clone + 'static> Drop for FlightGuard<K, V> {
    fn drop(&mut self) {
        if self.id == 0 {
            return;
        }
        ISOLATE.with(|cell| {
            if let Some(iso) = cell.try_borrow_mut().ok().as_deref_mut().and_then(Option::as_mut) {
                let flights = (self.flights)(iso);
                if self.leader {
                    flights.abandon(&self.key, self.id);
                } else {
                    flights.leave(&self.key, self.id);
                }
            }
        });
    }
}
