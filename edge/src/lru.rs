//! A least-recently-used map bounded by bytes, for segments held in isolate memory. wasm memory
//! never shrinks, so the bound is on what we hold, not on what we once held.

use std::collections::HashMap;
use std::hash::Hash;

/// LRU by bytes. Eviction scans for the oldest entry: a few hundred segments at most, so a
/// scan is cheaper than the bookkeeping of a linked list.
pub struct ByteLru<K, V> {
    entries: HashMap<K, Entry<V>>,
    budget: usize,
    used: usize,
    tick: u64,
}

struct Entry<V> {
    value: V,
    bytes: usize,
    last_used: u64,
}

impl<K: Eq + Hash + Clone, V: Clone> ByteLru<K, V> {
    /// An empty cache holding at most `budget` bytes.
    pub fn new(budget: usize) -> Self {
        ByteLru { entries: HashMap::new(), budget, used: 0, tick: 0 }
    }

    /// The value for `key`, marking it recently used.
    pub fn get(&mut self, key: &K) -> Option<V> {
        self.tick += 1;
        let tick = self.tick;
        self.entries.get_mut(key).map(|e| {
            e.last_used = tick;
            e.value.clone()
        })
    }

    /// Inserts or replaces; evicts the least recently used until within budget. A value larger
    /// than the whole budget is not kept.
    pub fn insert(&mut self, key: K, value: V, bytes: usize) {
        if let Some(old) = self.entries.remove(&key) {
            self.used -= old.bytes;
        }
        if bytes > self.budget {
            return;
        }
        while self.used + bytes > self.budget {
            let oldest = self.entries.iter().min_by_key(|(_, e)| e.last_used).map(|(k, _)| k.clone());
            match oldest.and_then(|k| self.entries.remove(&k)) {
                Some(evicted) => self.used -= evicted.bytes,
                None => break,
            }
        }
        self.tick += 1;
        self.used += bytes;
        self.entries.insert(key, Entry { value, bytes, last_used: self.tick });
    }

    /// The value for `key`, without marking it used: for upkeep (bringing copies forward),
    /// which must not keep unused entries from being evicted.
    pub fn peek(&self, key: &K) -> Option<V> {
        self.entries.get(key).map(|e| e.value.clone())
    }

    /// The keys held that match `wanted`.
    pub fn keys_where(&self, wanted: impl Fn(&K) -> bool) -> Vec<K> {
        self.entries.keys().filter(|k| wanted(k)).cloned().collect()
    }

    /// Replaces the value of a held `key` in place, keeping its recency: upkeep again. False
    /// (and nothing kept) if `key` is not held, or the new value would pass the budget.
    pub fn replace(&mut self, key: &K, value: V, bytes: usize) -> bool {
        let Some(entry) = self.entries.get_mut(key) else {
            return false;
        };
        if self.used - entry.bytes + bytes > self.budget {
            self.remove(key);
            return false;
        }
        self.used = self.used - entry.bytes + bytes;
        entry.value = value;
        entry.bytes = bytes;
        true
    }

    /// Removes `key`.
    pub fn remove(&mut self, key: &K) {
        if let Some(old) = self.entries.remove(key) {
            self.used -= old.bytes;
        }
    }

    /// Bytes held.
    pub fn used_bytes(&self) -> usize {
        self.used
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether empty.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evicts_least_recently_used_to_stay_within_bytes() {
        let mut lru = ByteLru::new(100);
        lru.insert("a", 1, 40);
        lru.insert("b", 2, 40);
        assert_eq!(lru.get(&"a"), Some(1)); // a is now more recent than b
        lru.insert("c", 3, 40);
        assert_eq!(lru.get(&"b"), None, "b was least recently used");
        assert_eq!(lru.get(&"a"), Some(1));
        assert_eq!(lru.get(&"c"), Some(3));
        assert!(lru.used_bytes() <= 100);
    }

    #[test]
    fn replacing_updates_the_byte_count_and_oversized_values_are_not_kept() {
        let mut lru = ByteLru::new(100);
        lru.insert("a", 1, 60);
        lru.insert("a", 2, 30);
        assert_eq!(lru.used_bytes(), 30);
        lru.insert("huge", 9, 101);
        assert_eq!(lru.get(&"huge"), None);
        assert_eq!(lru.get(&"a"), Some(2));
        lru.remove(&"a");
        assert!(lru.is_empty());
        assert_eq!(lru.used_bytes(), 0);
    }

    #[test]
    fn upkeep_does_not_change_what_is_evicted_next() {
        let mut lru = ByteLru::new(100);
        lru.insert("old", 1, 40);
        lru.insert("new", 2, 40);
        assert_eq!(lru.peek(&"old"), Some(1));
        assert!(lru.replace(&"old", 11, 45));
        assert_eq!(lru.used_bytes(), 85);
        assert_eq!(lru.keys_where(|k| k.starts_with('o')), ["old"]);
        lru.insert("third", 3, 40);
        assert_eq!(lru.peek(&"old"), None, "peeked and replaced, still the least recently used");
        assert_eq!(lru.peek(&"new"), Some(2));
        assert!(!lru.replace(&"gone", 4, 1), "only held keys are replaced");
        assert!(!lru.replace(&"new", 5, 1_000), "a value past the budget is dropped");
        assert_eq!(lru.peek(&"new"), None);
    }
}
