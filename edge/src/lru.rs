//! A least-recently-used map that counts bytes, for the segment copies held in isolate
//! memory. It does not bound itself: its owner ([`crate::store`]) evicts down to what the
//! isolate's budget leaves for copies, which moves as spare buffers and journal tails come and
//! go. Evicted values are handed back, so their buffers can be reused.

use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;

/// LRU by bytes; the oldest entry is found through an ordered index, so eviction costs a log,
/// not a scan (a budget of 32 MiB holds 8,192 copies of 4 KiB).
pub struct ByteLru<K, V> {
    entries: HashMap<K, Entry<V>>,
    order: BTreeMap<u64, K>,
    used: usize,
    tick: u64,
}

struct Entry<V> {
    value: V,
    bytes: usize,
    last_used: u64,
}

impl<K: Eq + Hash + Clone, V: Clone> Default for ByteLru<K, V> {
    fn default() -> Self {
        ByteLru { entries: HashMap::new(), order: BTreeMap::new(), used: 0, tick: 0 }
    }
}

impl<K: Eq + Hash + Clone, V: Clone> ByteLru<K, V> {
    /// The value for `key`, marking it recently used.
    pub fn get(&mut self, key: &K) -> Option<V> {
        self.tick += 1;
        let entry = self.entries.get_mut(key)?;
        self.order.remove(&entry.last_used);
        entry.last_used = self.tick;
        self.order.insert(self.tick, key.clone());
        Some(entry.value.clone())
    }

    /// The value for `key`, without marking it used: for upkeep (bringing copies forward),
    /// which must not keep unused entries from being evicted.
    pub fn peek(&self, key: &K) -> Option<V> {
        self.entries.get(key).map(|e| e.value.clone())
    }

    /// Inserts as the most recently used; the value it replaces, if any.
    pub fn insert(&mut self, key: K, value: V, bytes: usize) -> Option<V> {
        let old = self.remove(&key);
        self.tick += 1;
        self.used += bytes;
        self.order.insert(self.tick, key.clone());
        self.entries.insert(key, Entry { value, bytes, last_used: self.tick });
        old
    }

    /// Replaces the value of a held `key` in place, keeping its recency: upkeep again. The old
    /// value, or `Err(value)` when `key` is not held.
    pub fn replace(&mut self, key: &K, value: V, bytes: usize) -> Result<V, V> {
        let Some(entry) = self.entries.get_mut(key) else {
            return Err(value);
        };
        self.used = self.used - entry.bytes + bytes;
        entry.bytes = bytes;
        Ok(std::mem::replace(&mut entry.value, value))
    }

    /// Removes `key`; its value.
    pub fn remove(&mut self, key: &K) -> Option<V> {
        let old = self.entries.remove(key)?;
        self.order.remove(&old.last_used);
        self.used -= old.bytes;
        Some(old.value)
    }

    /// Evicts the least recently used entries until at most `max_bytes` are held; their values.
    pub fn evict_to(&mut self, max_bytes: usize) -> Vec<V> {
        let mut evicted = Vec::new();
        while self.used > max_bytes {
            let Some((_, key)) = self.order.pop_first() else { break };
            if let Some(old) = self.entries.remove(&key) {
                self.used -= old.bytes;
                evicted.push(old.value);
            }
        }
        evicted
    }

    /// The keys held that match `wanted`.
    pub fn keys_where(&self, wanted: impl Fn(&K) -> bool) -> Vec<K> {
        self.entries.keys().filter(|k| wanted(k)).cloned().collect()
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
    fn evicts_least_recently_used_down_to_the_bytes_asked() {
        let mut lru = ByteLru::default();
        lru.insert("a", 1, 40);
        lru.insert("b", 2, 40);
        assert_eq!(lru.get(&"a"), Some(1)); // a is now more recent than b
        lru.insert("c", 3, 40);
        assert_eq!(lru.evict_to(100), vec![2], "b was least recently used");
        assert_eq!(lru.get(&"b"), None);
        assert_eq!((lru.get(&"a"), lru.get(&"c")), (Some(1), Some(3)));
        assert_eq!(lru.used_bytes(), 80);
        assert_eq!(lru.evict_to(0), vec![1, 3]);
        assert!(lru.is_empty());
    }

    #[test]
    fn inserting_again_and_removing_hand_back_the_old_value() {
        let mut lru = ByteLru::default();
        assert_eq!(lru.insert("a", 1, 60), None);
        assert_eq!(lru.insert("a", 2, 30), Some(1));
        assert_eq!(lru.used_bytes(), 30);
        assert_eq!(lru.remove(&"a"), Some(2));
        assert_eq!(lru.remove(&"a"), None);
        assert!(lru.is_empty() && lru.used_bytes() == 0);
    }

    #[test]
    fn upkeep_does_not_change_what_is_evicted_next() {
        let mut lru = ByteLru::default();
        lru.insert("old", 1, 40);
        lru.insert("new", 2, 40);
        assert_eq!(lru.peek(&"old"), Some(1));
        assert_eq!(lru.replace(&"old", 11, 45), Ok(1));
        assert_eq!(lru.used_bytes(), 85);
        assert_eq!(lru.keys_where(|k| k.starts_with('o')), ["old"]);
        lru.insert("third", 3, 40);
        assert_eq!(lru.evict_to(100), vec![11], "peeked and replaced, still the least recently used");
        assert_eq!(lru.replace(&"gone", 4, 1), Err(4), "only held keys are replaced");
        assert_eq!(lru.len(), 2);
    }
}
