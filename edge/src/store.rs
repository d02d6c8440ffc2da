//! What the isolate holds for filters, under one byte budget (`EDGE_MAX_HELD_BYTES`): segment
//! copies (least recently used go first), spare segment buffers ([`BufferPool`]) and journal
//! tails ([`JournalTail`]).
//!
//! A filter has one current generation here, the one its newest manifest names: copies and
//! tails of any other generation are dropped when it changes (their buffers kept for the new
//! generation's segments, which have the same size unless the filter was resized), and a copy
//! of another generation is never kept. So what a rebuild costs the isolate is a filter's worth
//! of segments, replaced, not added to.
//!
//! The budget covers everything kept between requests. Tails take at most an eighth of it.
//! A buffer for a segment being loaded comes from the spares; when there is none of its size
//! and no room for a new one, the least recently used copies are evicted first and their
//! buffers reused, so that a full store turns over without growing memory. Spare buffers of
//! other sizes are given back to the allocator first when room is needed. Buffers of requests
//! in progress are not counted until kept.

use crate::copy::SegmentCopy;
use crate::lru::ByteLru;
use crate::pool::BufferPool;
use crate::tail::{Forward, JournalTail};
use bloomgate_filter::{JournalPosition, Params};
use std::collections::HashMap;

/// A held copy's name: filter, generation, index.
pub type SegmentKey = (String, u64, u32);

/// Held copies, spare buffers and journal tails, within a budget.
pub struct SegmentStore {
    budget: usize,
    copies: ByteLru<SegmentKey, SegmentCopy>,
    pool: BufferPool,
    tails: HashMap<(String, u64), JournalTail>,
    current: HashMap<String, u64>,
    reserved: usize,
    dropped_by_switch: u64,
}

/// What a store holds, in bytes and counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Holdings {
    /// Bytes of segment copies held.
    pub copy_bytes: usize,
    /// Segment copies held.
    pub copies: usize,
    /// Bytes of spare buffers.
    pub spare_bytes: usize,
    /// Spare buffers.
    pub spares: usize,
    /// Bytes of journal tails.
    pub tail_bytes: usize,
    /// Hashes in journal tails.
    pub tail_hashes: usize,
    /// Bytes held elsewhere and counted against the budget (manifests).
    pub reserved_bytes: usize,
    /// Copies dropped because their filter moved to another generation.
    pub dropped_by_switch: u64,
    /// Segment buffers reused from the spares, and newly allocated.
    pub buffers_reused: u64,
    /// See `buffers_reused`.
    pub buffers_allocated: u64,
}

impl Holdings {
    /// Everything held, in bytes: what the budget bounds.
    pub fn total_bytes(&self) -> usize {
        self.copy_bytes + self.spare_bytes + self.tail_bytes + self.reserved_bytes
    }
}

impl SegmentStore {
    /// An empty store within `budget` bytes.
    pub fn new(budget: usize) -> SegmentStore {
        SegmentStore {
            budget,
            copies: ByteLru::default(),
            pool: BufferPool::default(),
            tails: HashMap::new(),
            current: HashMap::new(),
            reserved: 0,
            dropped_by_switch: 0,
        }
    }

    /// The budget, in bytes.
    pub fn budget(&self) -> usize {
        self.budget
    }

    /// Most bytes all journal tails together may take.
    pub fn tail_budget(&self) -> usize {
        self.budget / 8
    }

    /// The copy held for `key`, marked recently used.
    pub fn get(&mut self, key: &SegmentKey) -> Option<SegmentCopy> {
        self.copies.get(key)
    }

    /// The copy held for `key`, for upkeep (not marked used).
    pub fn peek(&self, key: &SegmentKey) -> Option<SegmentCopy> {
        self.copies.peek(key)
    }

    /// An empty buffer for a segment of `len` bytes: a spare one of that size, else (when
    /// there is no room for a new one) one of the least recently used copies', evicted for it.
    pub fn buffer(&mut self, len: usize) -> Vec<u8> {
        let room = self.room();
        while !self.pool.has(len) && self.copies.used_bytes() + self.pool.bytes() + len > room {
            let evicted = self.copies.evict_to(self.copies.used_bytes().saturating_sub(1));
            if evicted.is_empty() {
                break;
            }
            for copy in evicted {
                self.recycle(copy);
            }
        }
        if !self.pool.has(len) {
            self.pool.shrink_to(room.saturating_sub(self.copies.used_bytes() + len), len);
        }
        self.pool.take(len)
    }

    /// Gives a buffer that was not kept (a copy that could not be used) back for reuse.
    pub fn give_back(&mut self, buffer: Vec<u8>) {
        self.pool.give(buffer);
        self.settle(0);
    }

    /// Keeps `copy` as `key`, unless its filter's current generation is another, the copy held
    /// is further along, or it is larger than half the budget; evicts to stay within budget.
    /// Whether it was kept.
    pub fn keep(&mut self, key: SegmentKey, copy: SegmentCopy) -> bool {
        let other_generation = self.current.get(&key.0).is_some_and(|g| *g != key.1);
        let ahead = self.copies.peek(&key).is_some_and(|held| held.is_ahead_of(&copy));
        if other_generation || ahead || copy.bytes() > self.budget / 2 {
            return false;
        }
        let len = copy.bytes();
        if let Some(old) = self.copies.insert(key, copy, len) {
            self.recycle(old);
        }
        self.settle(len);
        true
    }

    /// Brings the copy held as `key` up to its generation's journal tail's head, in memory,
    /// keeping its recency: the copy held then ([`Forward::Moved`]), or why not. Re-encoded
    /// copies take a spare buffer, and the one they replace becomes a spare.
    pub fn bring_forward(&mut self, key: &SegmentKey) -> Forward {
        let Some(tail) = self.tails.get(&(key.0.clone(), key.1)) else {
            return Forward::NotCovered;
        };
        let forward = forward_held(&mut self.copies, &mut self.pool, tail, key);
        // A re-encoding may have taken a new buffer and given the old one to the spares.
        self.settle(0);
        forward
    }

    /// Brings every copy held of `filter`'s `generation` up to its tail's head; how many moved.
    pub fn bring_all_forward(&mut self, filter: &str, generation: u64) -> usize {
        let keys = self.copies.keys_where(|k| k.0 == filter && k.1 == generation);
        keys.iter().filter(|key| matches!(self.bring_forward(key), Forward::Moved(_))).count()
    }

    /// [`bring_all_forward`](Self::bring_all_forward) through `tail` instead of the one kept:
    /// a chunk older than the kept tail reaches, for the copies at its start.
    pub fn bring_all_forward_through(&mut self, tail: &JournalTail, filter: &str, generation: u64) -> usize {
        let keys = self.copies.keys_where(|k| k.0 == filter && k.1 == generation);
        let moved = keys
            .iter()
            .filter(|key| matches!(forward_held(&mut self.copies, &mut self.pool, tail, key), Forward::Moved(_)))
            .count();
        self.settle(0);
        moved
    }

    /// Drops the copy held for `key`.
    pub fn remove(&mut self, key: &SegmentKey) {
        if let Some(old) = self.copies.remove(key) {
            self.recycle(old);
        }
    }

    /// The copies held of `filter`'s `generation`.
    pub fn copies_of(&self, filter: &str, generation: u64) -> Vec<(SegmentKey, SegmentCopy)> {
        let keys = self.copies.keys_where(|k| k.0 == filter && k.1 == generation);
        keys.into_iter().filter_map(|k| self.copies.peek(&k).map(|c| (k, c))).collect()
    }

    /// `filter`'s current generation is now `generation`: copies and tails of any other go.
    pub fn switch_generation(&mut self, filter: &str, generation: u64) {
        if self.current.insert(filter.to_owned(), generation) == Some(generation) {
            return;
        }
        for key in self.copies.keys_where(|k| k.0 == filter && k.1 != generation) {
            self.remove(&key);
            self.dropped_by_switch += 1;
        }
        self.tails.retain(|(f, g), _| f != filter || *g == generation);
        self.settle(0);
    }

    /// The journal tail of `filter`'s `generation`, if one is kept.
    pub fn tail(&self, filter: &str, generation: u64) -> Option<&JournalTail> {
        self.tails.get(&(filter.to_owned(), generation))
    }

    /// The journal tail of `filter`'s `generation`, started empty at `head` if none is kept.
    pub fn tail_mut(
        &mut self,
        filter: &str,
        generation: u64,
        params: Params,
        head: JournalPosition,
    ) -> &mut JournalTail {
        self.tails.entry((filter.to_owned(), generation)).or_insert_with(|| JournalTail::at(generation, params, head))
    }

    /// Forgets the journal tail of `filter`'s `generation` (its entries are no longer kept by
    /// the origin, or it could not be extended).
    pub fn drop_tail(&mut self, filter: &str, generation: u64) {
        self.tails.remove(&(filter.to_owned(), generation));
    }

    /// Counts `bytes` held elsewhere (the manifests) against the budget too.
    pub fn reserve(&mut self, bytes: usize) {
        let grew = bytes > self.reserved;
        self.reserved = bytes;
        if grew {
            self.settle(0);
        }
    }

    /// After tails grew: trims them to their share and evicts copies to stay within budget.
    pub fn tails_grew(&mut self) {
        self.settle(0);
    }

    /// What is held.
    pub fn holdings(&self) -> Holdings {
        let (buffers_reused, buffers_allocated) = self.pool.reuse_counts();
        Holdings {
            copy_bytes: self.copies.used_bytes(),
            copies: self.copies.len(),
            spare_bytes: self.pool.bytes(),
            spares: self.pool.len(),
            tail_bytes: self.tail_bytes(),
            tail_hashes: self.tails.values().map(JournalTail::hashes).sum(),
            reserved_bytes: self.reserved,
            dropped_by_switch: self.dropped_by_switch,
            buffers_reused,
            buffers_allocated,
        }
    }

    /// What the budget leaves for copies and spare buffers.
    fn room(&self) -> usize {
        self.budget.saturating_sub(self.tail_bytes() + self.reserved)
    }

    fn tail_bytes(&self) -> usize {
        self.tails.values().map(JournalTail::bytes).sum()
    }

    fn recycle(&mut self, copy: SegmentCopy) {
        if let Some(buffer) = copy.into_buffer() {
            self.pool.give(buffer);
        }
    }

    /// Brings what is held within budget: tails to their share (the largest halved first),
    /// then spare buffers (other sizes than `keep_len` first), then copies (least recently
    /// used), whose buffers become spares while there is room.
    fn settle(&mut self, keep_len: usize) {
        while self.tail_bytes() > self.tail_budget() {
            let Some(largest) = self.tails.values_mut().max_by_key(|t| t.bytes()) else { break };
            let half = largest.bytes() / 2;
            largest.trim_to(half);
        }
        let room = self.room();
        if self.copies.used_bytes() + self.pool.bytes() <= room {
            return;
        }
        self.pool.shrink_to(room.saturating_sub(self.copies.used_bytes()), keep_len);
        for copy in self.copies.evict_to(room) {
            self.recycle(copy);
        }
        self.pool.shrink_to(room.saturating_sub(self.copies.used_bytes()), keep_len);
    }
}

/// Brings the copy held as `key` forward through `tail`, replacing it in place (the buffer it
/// replaces becomes a spare).
fn forward_held(
    copies: &mut ByteLru<SegmentKey, SegmentCopy>,
    pool: &mut BufferPool,
    tail: &JournalTail,
    key: &SegmentKey,
) -> Forward {
    let Some(copy) = copies.peek(key) else {
        return Forward::NotCovered;
    };
    let forward = tail.bring_forward(&copy, |len| pool.take(len));
    drop(copy); // the held one is then the last reference to its buffer
    if let Forward::Moved(next) = &forward {
        if let Ok(old) = copies.replace(key, next.clone(), next.bytes()) {
            if let Some(buffer) = old.into_buffer() {
                pool.give(buffer);
            }
        }
    }
    forward
}

#[cfg(test)]
mod tests {
    use super::*;
    use bloomgate_filter::{decode_journal, encode_journal, encode_segment_at, hash_key, Segment, SizingOptions};

    const KIB: usize = 1024;

    fn params(seed: u64) -> Params {
        Params::for_capacity_with(1_000_000, 0.01, SizingOptions { seed, segment_bytes: 4 * KIB as u64 }).unwrap()
    }

    fn at(added: u64) -> JournalPosition {
        JournalPosition { added, id_ms: added, id_seq: 0 }
    }

    /// Segment `index` of `generation`, current to `position`, its bytes in `buffer`.
    fn copy(generation: u64, index: u32, position: u64, mut buffer: Vec<u8>) -> SegmentCopy {
        let p = params(generation);
        let bytes = encode_segment_at(&p, generation, index, 1, at(position), &vec![0; p.segment_bytes() as usize]);
        buffer.clear();
        buffer.extend_from_slice(&bytes.unwrap());
        SegmentCopy::new(Segment::decode(buffer).unwrap())
    }

    fn key(generation: u64, index: u32) -> SegmentKey {
        ("f".into(), generation, index)
    }

    #[test]
    fn copies_stay_within_the_budget_and_evicted_buffers_serve_the_next() {
        let mut store = SegmentStore::new(256 * KIB);
        let size = copy(1, 0, 0, Vec::new()).bytes();
        for i in 0..200u32 {
            let buffer = store.buffer(size);
            assert!(store.keep(key(1, i % 120), copy(1, i % 120, 0, buffer)));
            let h = store.holdings();
            assert!(h.total_bytes() <= store.budget(), "{h:?}");
        }
        let h = store.holdings();
        assert!(h.copies >= 50, "most of the budget holds copies: {h:?}");
        assert_eq!(h.buffers_allocated as usize, h.copies + h.spares, "once full, every load reused a buffer: {h:?}");
        assert_eq!(h.buffers_reused + h.buffers_allocated, 200);
    }

    #[test]
    fn a_new_generation_replaces_the_old_one_and_reuses_its_buffers() {
        let mut store = SegmentStore::new(1024 * KIB);
        store.switch_generation("f", 1);
        let size = copy(1, 0, 0, Vec::new()).bytes();
        for i in 0..20 {
            let b = store.buffer(size);
            store.keep(key(1, i), copy(1, i, 0, b));
        }
        store.tail_mut("f", 1, params(1), at(0));
        store.switch_generation("f", 2);
        let h = store.holdings();
        assert_eq!((h.copies, h.spares, h.dropped_by_switch), (0, 20, 20), "{h:?}");
        assert!(store.tail("f", 1).is_none(), "the old generation's tail went too");
        assert!(!store.keep(key(1, 0), copy(1, 0, 0, Vec::new())), "a late copy of the old generation is not kept");
        for generation in 2..30u64 {
            store.switch_generation("f", generation);
            for i in 0..20 {
                let b = store.buffer(size);
                assert!(store.keep(key(generation, i), copy(generation, i, 0, b)));
            }
        }
        let h = store.holdings();
        assert_eq!(h.copies, 20);
        assert_eq!(h.buffers_allocated, 20, "28 more generations, no new buffer: {h:?}");
    }

    #[test]
    fn a_copy_further_along_is_not_replaced_by_an_older_one() {
        let mut store = SegmentStore::new(1024 * KIB);
        assert!(store.keep(key(1, 0), copy(1, 0, 9, Vec::new())));
        assert!(!store.keep(key(1, 0), copy(1, 0, 5, Vec::new())));
        assert_eq!(store.peek(&key(1, 0)).unwrap().current_to(), Some(at(9)));
    }

    #[test]
    fn copies_brought_forward_reuse_the_buffers_they_replace() {
        let mut store = SegmentStore::new(1024 * KIB);
        let p = params(1);
        for i in 0..p.segment_count.min(40) {
            store.keep(key(1, i), copy(1, i, 0, Vec::new()));
        }
        let mut position = 0;
        for round in 0..10u64 {
            let entries: Vec<Vec<_>> =
                (0..20u64).map(|i| vec![hash_key(&(round * 100 + i).to_le_bytes(), p.seed)]).collect();
            let chunk = encode_journal(1, p.seed, position, at(position + 20), &entries);
            store.tail_mut("f", 1, p, at(0)).add(&decode_journal(&chunk).unwrap()).unwrap();
            position += 20;
            assert_eq!(store.bring_all_forward("f", 1), 40);
            assert!(store.copies_of("f", 1).iter().all(|(_, c)| c.current_to() == Some(at(position))));
        }
        let h = store.holdings();
        assert!(h.buffers_allocated <= 25, "re-encodings take the buffers they free: {h:?}");
        assert!(h.total_bytes() <= store.budget(), "{h:?}");
        assert!(matches!(store.bring_forward(&key(1, 999)), Forward::NotCovered), "not held");
    }

    #[test]
    fn bytes_reserved_elsewhere_count_against_the_budget() {
        let mut store = SegmentStore::new(256 * KIB);
        let size = copy(1, 0, 0, Vec::new()).bytes();
        for i in 0..100 {
            let b = store.buffer(size);
            store.keep(key(1, i), copy(1, i, 0, b));
        }
        store.reserve(100 * KIB);
        let h = store.holdings();
        assert_eq!(h.reserved_bytes, 100 * KIB);
        assert!(h.total_bytes() <= store.budget(), "{h:?}");
        assert!(h.copies < 40, "copies made room: {h:?}");
    }

    #[test]
    fn tails_take_at_most_their_share() {
        let mut store = SegmentStore::new(256 * KIB);
        let p = params(1);
        let entries: Vec<Vec<_>> = (0..4_000u64).map(|i| vec![hash_key(&i.to_le_bytes(), p.seed)]).collect();
        let chunk = encode_journal(1, p.seed, 0, at(4_000), &entries);
        store.tail_mut("f", 1, p, at(0)).add(&decode_journal(&chunk).unwrap()).unwrap();
        store.tails_grew();
        let h = store.holdings();
        assert!(h.tail_bytes <= store.tail_budget(), "{h:?}");
        assert!(store.tail("f", 1).unwrap().base() > 0);
    }
}
