//! A map by filter name that every lookup reads and almost nothing writes, read without
//! writing memory another core reads or writes.
//!
//! A `Mutex` or `RwLock` around a map, even to read it, writes the lock's word, and cloning the
//! `Arc` found there writes its count: on two cores, each lookup moved those cache lines from
//! the other core (about 15 % of a "no"'s time, BENCHMARKS.md). Here readers load the current
//! map with `arc-swap` (whose readers write only their own thread's slot) and read the entry in
//! place, inside a closure, cloning nothing. Writers, rare (a filter seen for the first time,
//! one dropped), copy the map, change the copy and publish it, one writer at a time. Values that
//! change often belong inside the entry (atomics, `ArcSwap`), not in the map: a change there
//! copies nothing.

use arc_swap::ArcSwap;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// The map: names to `V`.
pub struct ReadMostly<V> {
    map: ArcSwap<HashMap<Box<str>, V>>,
    writer: Mutex<()>,
}

impl<V> Default for ReadMostly<V> {
    fn default() -> Self {
        ReadMostly { map: ArcSwap::from_pointee(HashMap::new()), writer: Mutex::new(()) }
    }
}

impl<V: Clone> ReadMostly<V> {
    /// `read` of the entry of `name`, if there is one.
    pub fn read<R>(&self, name: &str, read: impl FnOnce(&V) -> R) -> Option<R> {
        self.map.load().get(name).map(read)
    }

    /// Changes the map with `change`, applied to a copy that replaces it (writers one at a
    /// time; readers see the map before or after, never in between).
    pub fn update<R>(&self, change: impl FnOnce(&mut HashMap<Box<str>, V>) -> R) -> R {
        let _one = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        let mut next = HashMap::clone(&self.map.load());
        let result = change(&mut next);
        self.map.store(Arc::new(next));
        result
    }

    /// The entry of `name`, made by `make` if there is none (once, however many ask at once).
    pub fn get_or_insert_with(&self, name: &str, make: impl FnOnce() -> V) -> V {
        if let Some(found) = self.read(name, V::clone) {
            return found;
        }
        self.update(|map| map.entry(name.into()).or_insert_with(make).clone())
    }

    /// `read` of the entry of `name`, made by `make` first if there is none.
    pub fn read_or_insert_with<R>(&self, name: &str, make: impl FnOnce() -> V, read: impl FnOnce(&V) -> R) -> R {
        if let Some(found) = self.map.load().get(name) {
            return read(found);
        }
        read(&self.get_or_insert_with(name, make))
    }

    /// Entries now (what a test asks of an owner's memory).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.map.load().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_read_in_place_and_made_once() {
        let map: ReadMostly<Arc<u64>> = ReadMostly::default();
        assert_eq!(map.read("a", |v| **v), None);
        let made = map.get_or_insert_with("a", || Arc::new(7));
        let again = map.get_or_insert_with("a", || Arc::new(8));
        assert!(Arc::ptr_eq(&made, &again), "the second ask gets the first entry");
        assert_eq!(map.read("a", |v| **v), Some(7));
        assert_eq!(Arc::strong_count(&made), 3, "reading cloned nothing: the map's, and the two asked");
        map.update(|m| m.remove("a"));
        assert_eq!(map.read("a", |v| **v), None);
    }

    #[test]
    fn concurrent_first_asks_agree_on_one_entry() {
        let map: ReadMostly<Arc<usize>> = ReadMostly::default();
        let got: Vec<Arc<usize>> = std::thread::scope(|s| {
            let asks: Vec<_> = (0..8)
                .map(|i| {
                    s.spawn({
                        let map = &map;
                        move || map.get_or_insert_with("f", || Arc::new(i))
                    })
                })
                .collect();
            asks.into_iter().map(|a| a.join().unwrap()).collect()
        });
        assert!(got.iter().all(|v| Arc::ptr_eq(v, &got[0])));
    }
}
