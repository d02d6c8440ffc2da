//! The journal's tail as the isolate keeps it: every key hash added to a filter generation
//! between two positions, filed by the segment it falls in, so that any copy current to a
//! position in that range is brought up to the head from memory, without asking the origin.
//!
//! Why keep it: a filter larger than the isolate's budget is mostly read through the Cache API,
//! whose copies carry the position they were written at and fall further behind as they age.
//! Each such copy once cost a journal request to the origin; with the tail, a copy from the
//! Cache API costs only its own segment's hashes since its position (a few, at 16 bytes a key
//! written) and one re-encoding. The tail grows by the refreshes the isolate makes anyway (one
//! request per filter per S/2, the entries since the head) and, once, backwards to the oldest
//! copy it meets; it is trimmed from its old end when past its share of the budget.
//!
//! Entries are filed whole: the tail covers `(base, head]` completely or not at all, and a
//! chunk that would leave a gap is refused. Setting bits is idempotent, so an entry filed twice
//! (chunks that overlap) changes nothing but the bytes kept.

use crate::copy::SegmentCopy;
use bloomgate_filter::{JournalPosition, JournalView, KeyHash, Params};
use std::collections::HashMap;

/// Bytes a filed hash takes: its position and the 16-byte hash.
const HASH_ENTRY_BYTES: usize = std::mem::size_of::<Filed>();
/// Bytes a segment's list takes before any hash (its vector and its place in the map).
const BUCKET_BYTES: usize = 48;

#[derive(Clone, Copy, Debug)]
struct Filed {
    added: u64,
    hash: KeyHash,
}

/// The journal of one filter generation between `base` (exclusive) and `head`.
#[derive(Debug)]
pub struct JournalTail {
    generation: u64,
    params: Params,
    base: u64,
    head: JournalPosition,
    by_segment: HashMap<u32, Vec<Filed>>,
    filed: usize,
    bytes: usize,
}

/// Why a chunk was not added to a tail.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// Another generation or seed.
    WrongFilter,
    /// Entries between the chunk and the tail are missing: it neither starts at or before the
    /// head nor reaches the base.
    Gap,
}

/// What the tail can do for a copy.
#[derive(Debug)]
pub enum Forward {
    /// Already current to the head (or past it), or of another generation: nothing to do.
    Current,
    /// Brought to the head: keep this instead.
    Moved(SegmentCopy),
    /// The copy is older than the tail's base (or names no position): the tail cannot help.
    NotCovered,
}

impl JournalTail {
    /// An empty tail at `head`: copies current to `head` or later can be brought forward as
    /// entries arrive.
    pub fn at(generation: u64, params: Params, head: JournalPosition) -> JournalTail {
        JournalTail { generation, params, base: head.added, head, by_segment: HashMap::new(), filed: 0, bytes: 0 }
    }

    /// The newest position whose entries are all kept.
    pub fn head(&self) -> JournalPosition {
        self.head
    }

    /// Entries up to this position are not kept: copies must be at least here.
    pub fn base(&self) -> u64 {
        self.base
    }

    /// Whether a copy current to `at` can be brought to the head from the tail.
    pub fn covers(&self, at: u64) -> bool {
        at >= self.base
    }

    /// Hashes kept.
    pub fn hashes(&self) -> usize {
        self.filed
    }

    /// Bytes of isolate memory the tail takes (its vectors' allocations, roughly; kept up to
    /// date as it grows, so asking is free).
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    fn count_bytes(&self) -> usize {
        let filed: usize = self.by_segment.values().map(|v| v.capacity() * HASH_ENTRY_BYTES + BUCKET_BYTES).sum();
        filed + self.by_segment.capacity() * BUCKET_BYTES
    }

    /// Adds a verified chunk whose entries overlap or adjoin the tail: forwards (it starts at
    /// or before the head) or backwards (it reaches the base). The head moves to the chunk's
    /// end if that is later, the base to its start if that is earlier.
    pub fn add(&mut self, chunk: &JournalView<'_>) -> Result<(), Refused> {
        if chunk.generation != self.generation || chunk.seed != self.params.seed {
            return Err(Refused::WrongFilter);
        }
        if chunk.from > self.head.added || chunk.to.added < self.base {
            return Err(Refused::Gap);
        }
        let (base, head) = (self.base, self.head.added);
        for (added, hashes) in chunk.entries() {
            if added > base && added <= head {
                continue; // already kept
            }
            for hash in hashes {
                let segment = self.params.locate(&hash).segment;
                let filed = self.by_segment.entry(segment).or_default();
                let before = filed.capacity();
                filed.push(Filed { added, hash });
                self.bytes +=
                    (filed.capacity() - before) * HASH_ENTRY_BYTES + if before == 0 { BUCKET_BYTES * 2 } else { 0 };
                self.filed += 1;
            }
        }
        self.base = self.base.min(chunk.from);
        if chunk.to.added > self.head.added {
            self.head = chunk.to;
        }
        Ok(())
    }

    /// `copy` brought up to the head: its own segment's hashes after its position set in a
    /// buffer from `buffer` (asked for only when there are some), or only its position moved.
    pub fn bring_forward(&self, copy: &SegmentCopy, buffer: impl FnOnce(usize) -> Vec<u8>) -> Forward {
        let header = copy.segment().header();
        if header.generation != self.generation || header.params != self.params {
            return Forward::Current;
        }
        let Some(at) = copy.current_to() else {
            return Forward::NotCovered;
        };
        if at.added >= self.head.added {
            return Forward::Current;
        }
        if !self.covers(at.added) {
            return Forward::NotCovered;
        }
        let mut since = self.by_segment.get(&header.index).into_iter().flatten().filter(|f| f.added > at.added);
        let Some(first) = since.next() else {
            return Forward::Moved(copy.moved_to(self.head));
        };
        let hashes = std::iter::once(first).chain(since).map(|f| &f.hash);
        match copy.segment().advanced(self.head, hashes, buffer(copy.bytes())) {
            Ok(segment) => Forward::Moved(SegmentCopy::new(segment)),
            // A copy with a position is format 2, which `advanced` takes: cannot happen.
            Err(_) => Forward::NotCovered,
        }
    }

    /// Drops the oldest entries until the tail takes at most `max_bytes`, moving the base
    /// forward; copies older than the new base then need the origin again. At least half of
    /// what is kept goes at once, so trimming is rare.
    pub fn trim_to(&mut self, max_bytes: usize) {
        while self.bytes() > max_bytes && self.filed > 0 {
            let span = self.head.added - self.base;
            let new_base = self.base + span.div_ceil(2);
            for filed in self.by_segment.values_mut() {
                filed.retain(|f| f.added > new_base);
                filed.shrink_to_fit();
            }
            self.by_segment.retain(|_, filed| !filed.is_empty());
            self.by_segment.shrink_to_fit();
            self.filed = self.by_segment.values().map(Vec::len).sum();
            self.bytes = self.count_bytes();
            self.base = new_base;
        }
    }

    /// The params of the generation it keeps.
    pub fn params(&self) -> &Params {
        &self.params
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bloomgate_filter::{
        decode_journal, encode_journal, encode_segment_at, hash_key, BloomFilter, Segment, SizingOptions,
    };

    fn params() -> Params {
        Params::for_capacity_with(20_000, 0.01, SizingOptions { seed: 5, segment_bytes: 1024 }).unwrap()
    }

    fn at(added: u64) -> JournalPosition {
        JournalPosition { added, id_ms: 1_000 + added, id_seq: 0 }
    }

    fn key(i: u64) -> [u8; 8] {
        i.to_le_bytes()
    }

    /// Chunk of single-key adds `from+1..=to`, key i at position i.
    fn chunk(from: u64, to: u64) -> Vec<u8> {
        let p = params();
        let entries: Vec<Vec<KeyHash>> = (from + 1..=to).map(|i| vec![hash_key(&key(i), p.seed)]).collect();
        encode_journal(7, p.seed, from, at(to), &entries)
    }

    fn copies(filter: &BloomFilter, position: u64) -> Vec<SegmentCopy> {
        let p = filter.params();
        (0..p.segment_count)
            .map(|i| {
                let bytes = encode_segment_at(p, 7, i, 1, at(position), &filter.segment_payload(i)).unwrap();
                SegmentCopy::new(Segment::decode(bytes).unwrap())
            })
            .collect()
    }

    fn filter_up_to(n: u64) -> BloomFilter {
        let mut f = BloomFilter::new(params());
        for i in 1..=n {
            f.insert(&key(i));
        }
        f
    }

    #[test]
    fn copies_anywhere_in_the_tail_come_out_as_the_fresh_segment() {
        let mut tail = JournalTail::at(7, params(), at(100));
        for (from, to) in [(100, 130), (130, 131), (131, 200)] {
            tail.add(&decode_journal(&chunk(from, to)).unwrap()).unwrap();
        }
        assert_eq!((tail.base(), tail.head()), (100, at(200)));
        let fresh = filter_up_to(200);
        for position in [100, 120, 131, 199] {
            for (i, copy) in copies(&filter_up_to(position), position).iter().enumerate() {
                let Forward::Moved(moved) = tail.bring_forward(copy, Vec::with_capacity) else {
                    panic!("copy at {position} of segment {i} not brought forward")
                };
                assert_eq!(moved.current_to(), Some(at(200)));
                assert_eq!(moved.segment().view().payload(), fresh.segment_payload(i as u32).as_slice());
                let untouched = moved.shares_bytes_with(copy);
                assert_eq!(untouched, moved.segment().view().payload() == copy.segment().view().payload());
            }
        }
        assert!(matches!(tail.bring_forward(&copies(&fresh, 200)[0], Vec::with_capacity), Forward::Current));
        assert!(matches!(tail.bring_forward(&copies(&fresh, 250)[0], Vec::with_capacity), Forward::Current));
        assert!(matches!(
            tail.bring_forward(&copies(&filter_up_to(99), 99)[0], Vec::with_capacity),
            Forward::NotCovered
        ));
    }

    #[test]
    fn the_tail_grows_backwards_to_an_older_copy_and_refuses_gaps() {
        let mut tail = JournalTail::at(7, params(), at(100));
        tail.add(&decode_journal(&chunk(100, 150)).unwrap()).unwrap();
        assert_eq!(tail.add(&decode_journal(&chunk(160, 170)).unwrap()), Err(Refused::Gap), "151..160 missing");
        assert_eq!(tail.add(&decode_journal(&chunk(10, 90)).unwrap()), Err(Refused::Gap), "91..100 missing");
        let hashes = tail.hashes();
        tail.add(&decode_journal(&chunk(40, 120)).unwrap()).unwrap();
        assert_eq!(tail.base(), 40);
        assert_eq!(tail.hashes(), hashes + 60, "only the entries it did not have");
        let old = &copies(&filter_up_to(40), 40)[3];
        let Forward::Moved(moved) = tail.bring_forward(old, Vec::with_capacity) else { panic!() };
        assert_eq!(moved.segment().view().payload(), filter_up_to(150).segment_payload(3).as_slice());
        let other = encode_journal(8, params().seed, 100, at(101), &[vec![hash_key(&key(1), params().seed)]]);
        assert_eq!(tail.add(&decode_journal(&other).unwrap()), Err(Refused::WrongFilter));
    }

    #[test]
    fn trimming_moves_the_base_and_keeps_what_is_left_exact() {
        let mut tail = JournalTail::at(7, params(), at(0));
        tail.add(&decode_journal(&chunk(0, 4_000)).unwrap()).unwrap();
        let full = tail.bytes();
        assert!(
            full.abs_diff(tail.count_bytes()) * 10 < full,
            "kept up to date: {full} against {}",
            tail.count_bytes()
        );
        tail.trim_to(full / 2);
        assert!(tail.bytes() <= full / 2, "{} of {full}", tail.bytes());
        assert!(tail.base() >= 2_000 && tail.head() == at(4_000));
        assert!(matches!(
            tail.bring_forward(&copies(&filter_up_to(1_000), 1_000)[0], Vec::with_capacity),
            Forward::NotCovered
        ));
        let position = tail.base();
        let fresh = filter_up_to(4_000);
        for (i, copy) in copies(&filter_up_to(position), position).iter().enumerate() {
            let Forward::Moved(moved) = tail.bring_forward(copy, Vec::with_capacity) else { panic!() };
            assert_eq!(moved.segment().view().payload(), fresh.segment_payload(i as u32).as_slice());
        }
    }
}
