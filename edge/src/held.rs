//! A segment the edge holds, with the insert-journal position its bits are current to, and
//! what a journal chunk does to it.
//!
//! The position starts as the one the origin wrote in the segment's header (format 2: the
//! origin read the journal head before the bits) and moves forward as chunks are applied. A
//! chunk that sets bits in the segment makes a new, re-encoded copy (header position = the
//! chunk's end, checksum recomputed), so the bytes held always decode as they are; a chunk
//! that sets none of its bits only moves the position. Re-encoding costs one pass of XXH3 over
//! the payload (BENCHMARKS.md, "Edge: applying the insert journal"), paid only by segments a
//! write touched.

use bloomgate_filter::{encode_segment_at, JournalError, JournalPosition, JournalView, Params, Segment};
use std::rc::Rc;

/// A verified segment and the journal position it is current to (None: a format-1 segment,
/// which names no position and can only be used by its version).
#[derive(Clone, Debug)]
pub struct Held {
    segment: Rc<Segment>,
    current_to: Option<JournalPosition>,
}

/// What applying a chunk does to a held segment.
#[derive(Debug)]
pub enum Applied {
    /// Nothing to do: the copy is already current to the chunk's end (or past it).
    Unchanged,
    /// The copy brought forward: hold this instead.
    Forward(Held),
    /// The chunk cannot bring this copy forward (another generation or seed, entries missing
    /// between the copy's position and the chunk, no position at all): drop the copy, it is
    /// fetched whole when needed.
    Drop(JournalError),
}

impl Held {
    /// A segment as it arrived, current to the position its header names.
    pub fn new(segment: Segment) -> Held {
        let current_to = segment.header().journal;
        Held { segment: Rc::new(segment), current_to }
    }

    /// The verified segment.
    pub fn segment(&self) -> &Segment {
        &self.segment
    }

    /// The journal position the bits are current to.
    pub fn current_to(&self) -> Option<JournalPosition> {
        self.current_to
    }

    /// Bytes this copy occupies (for the byte-bounded cache).
    pub fn bytes(&self) -> usize {
        self.segment.as_bytes().len()
    }

    /// Whether this copy is further along than `other`: the same segment of the same generation
    /// at a later journal position. Keeping `other` in its place would only undo journal work
    /// (and a copy loaded from the Cache API can be much older than the one held).
    pub fn is_ahead_of(&self, other: &Held) -> bool {
        let (a, b) = (self.segment.header(), other.segment.header());
        a.generation == b.generation
            && a.index == b.index
            && a.params == b.params
            && matches!((self.current_to, other.current_to), (Some(x), Some(y)) if x.added > y.added)
    }

    /// Applies `chunk` (verified) to this copy: the entries after its own position only. A copy
    /// none of whose blocks the chunk touches ([`Touched`]) keeps its bytes and only moves its
    /// position.
    pub fn apply(&self, chunk: &JournalView<'_>, touched: &Touched) -> Applied {
        let header = self.segment.header();
        let Some(at) = self.current_to else {
            return Applied::Drop(JournalError::WrongFilter);
        };
        if chunk.generation != header.generation || chunk.seed != header.params.seed {
            return Applied::Drop(JournalError::WrongFilter);
        }
        if chunk.from > at.added {
            // The chunk starts after this copy's position: the entries (at, from] are not in
            // it, so it cannot bring the copy forward. The copy is still exact for its own
            // position, and stays behind (never answering "no" under a later head) until a
            // catch-up from its position. Not a damaged chunk: a copy kept while the chunk
            // was in flight, e.g. from the Cache API, where copies keep the position they were
            // fetched at. Dropping it made every such copy a segment fetch, and the next load
            // from the Cache API was as old again (docs/bench/notes/edge-freshness.md).
            return Applied::Unchanged;
        }
        if chunk.to.added <= at.added {
            return Applied::Unchanged;
        }
        if !touched.includes(&header.params, header.index) {
            return Applied::Forward(Held { segment: self.segment.clone(), current_to: Some(chunk.to) });
        }
        let mut payload = self.segment.view().payload().to_vec();
        let params = header.params;
        if let Err(e) = chunk.apply(header.generation, &params, header.index, at.added, &mut payload) {
            return Applied::Drop(e);
        }
        let encoded = encode_segment_at(&params, header.generation, header.index, header.version, chunk.to, &payload);
        match encoded.map(Segment::decode) {
            Ok(Ok(segment)) => Applied::Forward(Held { segment: Rc::new(segment), current_to: Some(chunk.to) }),
            // Cannot happen for a payload that decoded before; dropping is the safe answer.
            _ => Applied::Drop(JournalError::Malformed),
        }
    }
}

/// Which segments of a filter with given params a chunk's hashes fall in: one pass over the
/// chunk, so each held copy knows whether it must be re-encoded.
#[derive(Clone, Debug)]
pub struct Touched {
    params: Params,
    segments: Vec<bool>,
}

impl Touched {
    /// The segments `chunk` sets bits in, for a filter with `params`.
    pub fn of(chunk: &JournalView<'_>, params: &Params) -> Touched {
        let mut segments = vec![false; params.segment_count as usize];
        for (_, hashes) in chunk.entries() {
            for hash in hashes {
                if let Some(t) = segments.get_mut(params.locate(&hash).segment as usize) {
                    *t = true;
                }
            }
        }
        Touched { params: *params, segments }
    }

    /// Whether the chunk may set bits in segment `index` of a filter with `params`: yes for
    /// any segment of other params than the ones it was worked out for (so a mix-up costs a
    /// re-encoding, never a copy moved forward without its bits).
    pub fn includes(&self, params: &Params, index: u32) -> bool {
        self.params != *params || self.segments.get(index as usize).copied().unwrap_or(true)
    }

    /// How many segments the chunk touches.
    pub fn count(&self) -> usize {
        self.segments.iter().filter(|t| **t).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bloomgate_filter::{
        decode_journal, encode_journal, encode_segment, hash_key, BloomFilter, KeyHash, SizingOptions,
    };

    fn params() -> Params {
        Params::for_capacity_with(20_000, 0.01, SizingOptions { seed: 5, segment_bytes: 1024 }).unwrap()
    }

    fn key(i: u32) -> [u8; 4] {
        i.to_le_bytes()
    }

    fn at(added: u64) -> JournalPosition {
        JournalPosition { added, id_ms: 1_000 + added, id_seq: 0 }
    }

    /// Every segment of `filter` as the origin would send it, current to `position`.
    fn snapshot(filter: &BloomFilter, position: JournalPosition) -> Vec<Held> {
        let p = filter.params();
        (0..p.segment_count)
            .map(|i| {
                let bytes = encode_segment_at(p, 7, i, 3, position, &filter.segment_payload(i)).unwrap();
                Held::new(Segment::decode(bytes).unwrap())
            })
            .collect()
    }

    #[test]
    fn a_held_segment_plus_a_chunk_is_the_fresh_segment() {
        let p = params();
        let mut filter = BloomFilter::new(p);
        for i in 0..5_000 {
            filter.insert(&key(i));
        }
        let held = snapshot(&filter, at(100));
        // 8 adds of one key and 2 of 3 keys after the snapshot (positions 101..=110): few
        // enough that some of the segments get none.
        let mut entries: Vec<Vec<KeyHash>> = (0..8).map(|e| vec![hash_key(&key(5_000 + e), p.seed)]).collect();
        entries.extend((0..2).map(|e| (0..3).map(|j| hash_key(&key(6_000 + e * 3 + j), p.seed)).collect()));
        for entry in &entries {
            for h in entry {
                filter.insert_hash(h);
            }
        }
        let chunk_bytes = encode_journal(7, p.seed, 100, at(110), &entries);
        let chunk = decode_journal(&chunk_bytes).unwrap();
        let touched = Touched::of(&chunk, &p);
        assert!(touched.count() > 1, "the test needs writes in several segments");
        assert!(touched.count() < p.segment_count as usize, "and segments without any");
        for (i, copy) in held.iter().enumerate() {
            let fresh = filter.segment_payload(i as u32);
            let forward = match copy.apply(&chunk, &touched) {
                Applied::Forward(h) => h,
                other => panic!("segment {i}: {other:?}"),
            };
            assert_eq!(forward.current_to(), Some(at(110)));
            assert_eq!(forward.segment().view().payload(), fresh.as_slice(), "segment {i}");
            // The bytes held still decode, and say where they are current to.
            let decoded = Segment::decode(forward.segment().as_bytes().to_vec()).unwrap();
            assert_eq!(decoded.view().payload(), fresh.as_slice());
            if touched.includes(&p, i as u32) {
                assert_eq!(decoded.header().journal, Some(at(110)));
            } else {
                assert!(Rc::ptr_eq(&forward.segment, &copy.segment), "an untouched copy is not re-encoded");
            }
            // Applying again is a no-op; so is a chunk the copy is already past.
            assert!(matches!(forward.apply(&chunk, &touched), Applied::Unchanged));
        }
    }

    #[test]
    fn a_copy_between_the_chunks_ends_takes_only_what_it_lacks() {
        let p = params();
        let mut filter = BloomFilter::new(p);
        let entries: Vec<Vec<KeyHash>> = (0..20).map(|e| vec![hash_key(&key(e), p.seed)]).collect();
        for entry in &entries[..10] {
            filter.insert_hash(&entry[0]);
        }
        let held = snapshot(&filter, at(10)); // current to entry 10 of 20
        for entry in &entries[10..] {
            filter.insert_hash(&entry[0]);
        }
        let chunk_bytes = encode_journal(7, p.seed, 0, at(20), &entries);
        let chunk = decode_journal(&chunk_bytes).unwrap();
        let touched = Touched::of(&chunk, &p);
        for (i, copy) in held.iter().enumerate() {
            let Applied::Forward(h) = copy.apply(&chunk, &touched) else { panic!("segment {i}") };
            assert_eq!(h.segment().view().payload(), filter.segment_payload(i as u32).as_slice());
        }
    }

    #[test]
    fn a_chunk_starting_after_a_copy_leaves_it_where_it_was() {
        let p = params();
        let filter = BloomFilter::new(p);
        let copy = &snapshot(&filter, at(50))[0];
        let entries = vec![vec![hash_key(b"x", p.seed)]];
        let gap = encode_journal(7, p.seed, 60, at(61), &entries);
        let gap = decode_journal(&gap).unwrap();
        // Entries 51..=60 are not in it: the copy keeps its bits and its position 50, so it
        // stays behind any head past 50 (decide: not usable) until a chunk from 50 comes.
        assert!(matches!(copy.apply(&gap, &Touched::of(&gap, &p)), Applied::Unchanged));
        assert_eq!(copy.current_to(), Some(at(50)));
    }

    #[test]
    fn a_copy_is_ahead_only_of_an_earlier_position_of_the_same_segment() {
        let p = params();
        let filter = BloomFilter::new(p);
        let (old, new) = (&snapshot(&filter, at(50))[0], &snapshot(&filter, at(60))[0]);
        assert!(new.is_ahead_of(old));
        assert!(!old.is_ahead_of(new) && !new.is_ahead_of(new));
        let other_segment = &snapshot(&filter, at(40))[1];
        assert!(!new.is_ahead_of(other_segment));
        let v1 = Held::new(Segment::decode(encode_segment(&p, 7, 0, 3, &filter.segment_payload(0)).unwrap()).unwrap());
        assert!(!new.is_ahead_of(&v1) && !v1.is_ahead_of(new), "no position: no order");
    }

    #[test]
    fn chunks_of_another_generation_or_seed_drop_the_copy() {
        let p = params();
        let filter = BloomFilter::new(p);
        let copy = &snapshot(&filter, at(50))[0];
        let entries = vec![vec![hash_key(b"x", p.seed)]];
        let all = |chunk: &JournalView<'_>| Touched::of(chunk, &p);
        let other_generation = encode_journal(8, p.seed, 50, at(51), &entries);
        let other_generation = decode_journal(&other_generation).unwrap();
        assert!(matches!(
            copy.apply(&other_generation, &all(&other_generation)),
            Applied::Drop(JournalError::WrongFilter)
        ));
        let other_seed = encode_journal(7, p.seed + 1, 50, at(51), &entries);
        let other_seed = decode_journal(&other_seed).unwrap();
        assert!(matches!(copy.apply(&other_seed, &all(&other_seed)), Applied::Drop(_)));
        // A format-1 copy names no position: no chunk can say what it lacks.
        let v1 = Held::new(Segment::decode(encode_segment(&p, 7, 0, 3, &filter.segment_payload(0)).unwrap()).unwrap());
        let fine = encode_journal(7, p.seed, 50, at(51), &entries);
        let fine = decode_journal(&fine).unwrap();
        assert!(matches!(v1.apply(&fine, &all(&fine)), Applied::Drop(_)));
        // A chunk that ends where the copy is changes nothing.
        let behind = encode_journal(7, p.seed, 49, at(50), &entries);
        let behind = decode_journal(&behind).unwrap();
        assert!(matches!(copy.apply(&behind, &all(&behind)), Applied::Unchanged));
    }

    #[test]
    fn touched_segments_of_other_params_are_always_re_encoded() {
        let p = params();
        let entries = vec![vec![hash_key(b"x", p.seed)]];
        let chunk = encode_journal(7, p.seed, 0, at(1), &entries);
        let chunk = decode_journal(&chunk).unwrap();
        let touched = Touched::of(&chunk, &p);
        assert_eq!(touched.count(), 1);
        let other = Params { k: p.k + 1, ..p };
        assert!((0..p.segment_count).all(|i| touched.includes(&other, i)));
        assert!(touched.includes(&p, p.segment_count), "an index it does not know");
    }
}
