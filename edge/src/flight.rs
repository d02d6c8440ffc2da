//! One fetch per missing thing per isolate, without sharing a promise between requests.
//!
//! workerd ties every subrequest and promise to the request that started it, and cancels a
//! request that only waits on another request's I/O ("the Worker's code had hung"). So when
//! concurrent requests need the same manifest or segment, they do not await the first
//! request's future. The first becomes the *leader*: it fetches in its own context and posts
//! the plain-data result here. The others are *followers*: they check back on their own
//! timer, and take the result, or take over when the leader is gone (its request cancelled)
//! or late.
//!
//! The bookkeeping is pure and tested here; `glue` drives it with timers and fetches.

use std::collections::HashMap;
use std::hash::Hash;

/// The flights in one isolate, by what they fetch.
pub struct Flights<K, V> {
    next_id: u64,
    flights: HashMap<K, Flight<V>>,
}

struct Flight<V> {
    id: u64,
    started_ms: f64,
    followers: u32,
    outcome: Option<V>,
}

/// A request's part in a flight, named by the flight's id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Fetch, then [`Flights::finish`].
    Lead(u64),
    /// Wait, checking with [`Flights::check`].
    Follow(u64),
}

/// What a follower finds when it checks back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Check<V> {
    /// The leader's result.
    Ready(V),
    /// Still fetching.
    Waiting,
    /// The flight is over without a result for us (its leader gave up, or was late and
    /// replaced): join again.
    Gone,
}

impl<K: Eq + Hash + Clone, V: Clone> Default for Flights<K, V> {
    fn default() -> Self {
        Self { next_id: 1, flights: HashMap::new() }
    }
}

impl<K: Eq + Hash + Clone, V: Clone> Flights<K, V> {
    /// Joins the flight for `key`: follows one that is running and younger than
    /// `takeover_ms`, else leads a new one (replacing a late or finished one).
    pub fn join(&mut self, key: &K, now_ms: f64, takeover_ms: f64) -> Role {
        if let Some(f) = self.flights.get_mut(key) {
            if f.outcome.is_none() && !late(f.started_ms, now_ms, takeover_ms) {
                f.followers += 1;
                return Role::Follow(f.id);
            }
        }
        Role::Lead(self.start(key, now_ms))
    }

    /// Leads a new flight for `key` only if none is running in time: for refreshing ahead,
    /// where a request that finds a refresh under way has nothing to wait for.
    pub fn lead_if_idle(&mut self, key: &K, now_ms: f64, takeover_ms: f64) -> Option<u64> {
        match self.flights.get(key) {
            Some(f) if f.outcome.is_none() && !late(f.started_ms, now_ms, takeover_ms) => None,
            _ => Some(self.start(key, now_ms)),
        }
    }

    fn start(&mut self, key: &K, now_ms: f64) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.flights.insert(key.clone(), Flight { id, started_ms: now_ms, followers: 0, outcome: None });
        id
    }

    /// The leader posts its result; kept until every follower has taken it.
    pub fn finish(&mut self, key: &K, id: u64, outcome: V) {
        let Some(f) = self.flights.get_mut(key).filter(|f| f.id == id) else {
            return; // replaced while we were late: the new leader's result stands
        };
        if f.followers == 0 {
            self.flights.remove(key);
        } else {
            f.outcome = Some(outcome);
        }
    }

    /// A follower checks back. Taking the result leaves the flight.
    pub fn check(&mut self, key: &K, id: u64, now_ms: f64, takeover_ms: f64) -> Check<V> {
        let Some(f) = self.flights.get_mut(key).filter(|f| f.id == id) else {
            return Check::Gone;
        };
        match f.outcome.clone() {
            Some(outcome) => {
                self.leave(key, id);
                Check::Ready(outcome)
            }
            None if late(f.started_ms, now_ms, takeover_ms) => {
                self.leave(key, id);
                Check::Gone
            }
            None => Check::Waiting,
        }
    }

    /// A follower stops waiting (took the result, or its request went away).
    pub fn leave(&mut self, key: &K, id: u64) {
        let Some(f) = self.flights.get_mut(key).filter(|f| f.id == id) else {
            return;
        };
        f.followers = f.followers.saturating_sub(1);
        if f.followers == 0 && f.outcome.is_some() {
            self.flights.remove(key);
        }
    }

    /// A leader gives up without a result (its request went away): followers find the flight
    /// gone and one of them leads the next.
    pub fn abandon(&mut self, key: &K, id: u64) {
        if self.flights.get(key).is_some_and(|f| f.id == id && f.outcome.is_none()) {
            self.flights.remove(key);
        }
    }

    /// Flights held (running, or finished and not yet taken by every follower).
    pub fn len(&self) -> usize {
        self.flights.len()
    }

    /// Whether no flight is held.
    pub fn is_empty(&self) -> bool {
        self.flights.is_empty()
    }
}

fn late(started_ms: f64, now_ms: f64, takeover_ms: f64) -> bool {
    now_ms - started_ms >= takeover_ms
}

#[cfg(test)]
mod tests {
    use super::*;

    const TAKEOVER: f64 = 1000.0;

    #[test]
    fn the_first_leads_and_the_rest_follow_then_take_the_result() {
        let mut f: Flights<&str, u32> = Flights::default();
        let Role::Lead(id) = f.join(&"seg", 0.0, TAKEOVER) else { panic!("first must lead") };
        assert_eq!(f.join(&"seg", 1.0, TAKEOVER), Role::Follow(id));
        assert_eq!(f.join(&"seg", 2.0, TAKEOVER), Role::Follow(id));
        assert_eq!(f.check(&"seg", id, 3.0, TAKEOVER), Check::Waiting);
        f.finish(&"seg", id, 7);
        assert_eq!(f.check(&"seg", id, 4.0, TAKEOVER), Check::Ready(7));
        assert_eq!(f.len(), 1, "one follower has not taken the result yet");
        assert_eq!(f.check(&"seg", id, 5.0, TAKEOVER), Check::Ready(7));
        assert!(f.is_empty(), "the last follower's take frees the flight");
    }

    #[test]
    fn a_flight_without_followers_is_freed_when_it_finishes() {
        let mut f: Flights<u8, u8> = Flights::default();
        let Role::Lead(id) = f.join(&1, 0.0, TAKEOVER) else { panic!() };
        f.finish(&1, id, 9);
        assert!(f.is_empty());
    }

    #[test]
    fn different_keys_fly_apart() {
        let mut f: Flights<u8, u8> = Flights::default();
        assert!(matches!(f.join(&1, 0.0, TAKEOVER), Role::Lead(_)));
        assert!(matches!(f.join(&2, 0.0, TAKEOVER), Role::Lead(_)));
    }

    #[test]
    fn a_late_leader_is_taken_over_and_its_result_ignored() {
        let mut f: Flights<u8, u8> = Flights::default();
        let Role::Lead(old) = f.join(&1, 0.0, TAKEOVER) else { panic!() };
        let Role::Follow(_) = f.join(&1, 10.0, TAKEOVER) else { panic!() };
        // The follower notices the leader is late and rejoins: it leads now.
        assert_eq!(f.check(&1, old, TAKEOVER, TAKEOVER), Check::Gone);
        let Role::Lead(new) = f.join(&1, TAKEOVER, TAKEOVER) else { panic!("a late flight is replaced") };
        assert_ne!(new, old);
        let Role::Follow(_) = f.join(&1, TAKEOVER + 1.0, TAKEOVER) else { panic!() };
        f.finish(&1, old, 1); // the old leader's answer arrives: ignored
        assert_eq!(f.check(&1, new, TAKEOVER + 2.0, TAKEOVER), Check::Waiting);
        f.finish(&1, new, 2);
        assert_eq!(f.check(&1, new, TAKEOVER + 3.0, TAKEOVER), Check::Ready(2));
        assert!(f.is_empty());
    }

    #[test]
    fn an_abandoned_flight_sends_followers_to_lead_again() {
        let mut f: Flights<u8, u8> = Flights::default();
        let Role::Lead(id) = f.join(&1, 0.0, TAKEOVER) else { panic!() };
        let Role::Follow(_) = f.join(&1, 1.0, TAKEOVER) else { panic!() };
        f.abandon(&1, id);
        assert_eq!(f.check(&1, id, 2.0, TAKEOVER), Check::Gone);
        assert!(matches!(f.join(&1, 2.0, TAKEOVER), Role::Lead(_)));
    }

    #[test]
    fn a_finished_flight_is_not_joined_it_is_replaced() {
        // Results go to the caches; a request that still misses them wants a new fetch
        // (the last one failed), not the old outcome.
        let mut f: Flights<u8, u8> = Flights::default();
        let Role::Lead(id) = f.join(&1, 0.0, TAKEOVER) else { panic!() };
        let Role::Follow(_) = f.join(&1, 1.0, TAKEOVER) else { panic!() };
        f.finish(&1, id, 0);
        let Role::Lead(next) = f.join(&1, 2.0, TAKEOVER) else { panic!() };
        assert_ne!(next, id);
        assert_eq!(f.check(&1, id, 3.0, TAKEOVER), Check::Gone, "its follower rejoins the new flight");
    }

    #[test]
    fn a_follower_that_leaves_frees_a_finished_flight() {
        let mut f: Flights<u8, u8> = Flights::default();
        let Role::Lead(id) = f.join(&1, 0.0, TAKEOVER) else { panic!() };
        let Role::Follow(_) = f.join(&1, 1.0, TAKEOVER) else { panic!() };
        f.finish(&1, id, 5);
        f.leave(&1, id);
        assert!(f.is_empty());
    }

    #[test]
    fn refresh_ahead_leads_only_when_nothing_runs() {
        let mut f: Flights<u8, u8> = Flights::default();
        let id = f.lead_if_idle(&1, 0.0, TAKEOVER).expect("idle: lead");
        assert_eq!(f.lead_if_idle(&1, 1.0, TAKEOVER), None, "a refresh is under way");
        assert_eq!(f.join(&1, 2.0, TAKEOVER), Role::Follow(id), "a request without a fresh copy waits for it");
        assert!(f.lead_if_idle(&1, TAKEOVER, TAKEOVER).is_some(), "a late refresh is replaced");
    }
}
