//! A segment copy the isolate keeps: a verified segment and the insert-journal position its
//! bits are current to.
//!
//! The position starts as the one the origin wrote in the segment's header (format 2: the
//! origin read the journal head before the bits) and moves forward as journal entries are
//! applied ([`crate::tail::JournalTail::bring_forward`]). Entries that set bits in the segment
//! make a new, re-encoded copy (header position and checksum recomputed), so the bytes kept
//! always decode as they are; entries that set none of its bits only move the position, and
//! the bytes are shared.

use bloomgate_filter::{JournalPosition, Segment};
use std::rc::Rc;

/// A verified segment and the journal position it is current to (None: a format-1 segment,
/// which names no position and can only be used by its version).
#[derive(Clone, Debug)]
pub struct SegmentCopy {
    segment: Rc<Segment>,
    current_to: Option<JournalPosition>,
}

impl SegmentCopy {
    /// A segment as it arrived, current to the position its header names.
    pub fn new(segment: Segment) -> SegmentCopy {
        let current_to = segment.header().journal;
        SegmentCopy { segment: Rc::new(segment), current_to }
    }

    /// The same bits, known to be current to `at` (journal entries up to `at` set none of
    /// their bits): no new bytes.
    pub fn moved_to(&self, at: JournalPosition) -> SegmentCopy {
        SegmentCopy { segment: self.segment.clone(), current_to: Some(at) }
    }

    /// The verified segment.
    pub fn segment(&self) -> &Segment {
        &self.segment
    }

    /// The journal position the bits are current to.
    pub fn current_to(&self) -> Option<JournalPosition> {
        self.current_to
    }

    /// Bytes of isolate memory this copy's buffer takes (its allocation, which is what wasm
    /// memory pays for).
    pub fn bytes(&self) -> usize {
        self.segment.as_bytes().len()
    }

    /// Whether this copy and `other` share their bytes.
    pub fn shares_bytes_with(&self, other: &SegmentCopy) -> bool {
        Rc::ptr_eq(&self.segment, &other.segment)
    }

    /// Whether this copy is further along than `other`: the same segment of the same generation
    /// at a later journal position. Keeping `other` in its place would only undo journal work
    /// (and a copy loaded from the Cache API can be much older than the one held).
    pub fn is_ahead_of(&self, other: &SegmentCopy) -> bool {
        let (a, b) = (self.segment.header(), other.segment.header());
        a.generation == b.generation
            && a.index == b.index
            && a.params == b.params
            && matches!((self.current_to, other.current_to), (Some(x), Some(y)) if x.added > y.added)
    }

    /// The buffer, if this was the last reference to it: a copy dropped from the cache gives
    /// its allocation back for the next segment of its size.
    pub fn into_buffer(self) -> Option<Vec<u8>> {
        Rc::try_unwrap(self.segment).ok().map(Segment::into_bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bloomgate_filter::{encode_segment_at, Params, SizingOptions};

    fn copy_at(added: u64) -> SegmentCopy {
        let p = Params::for_capacity_with(5_000, 0.01, SizingOptions { seed: 1, segment_bytes: 1024 }).unwrap();
        let at = JournalPosition { added, id_ms: added, id_seq: 0 };
        let bytes = encode_segment_at(&p, 3, 0, 1, at, &vec![0; p.segment_bytes() as usize]).unwrap();
        SegmentCopy::new(Segment::decode(bytes).unwrap())
    }

    #[test]
    fn a_copy_further_along_is_ahead_and_its_buffer_comes_back_only_when_unshared() {
        let (old, new) = (copy_at(5), copy_at(9));
        assert!(new.is_ahead_of(&old) && !old.is_ahead_of(&new) && !new.is_ahead_of(&new));
        let moved = old.moved_to(JournalPosition { added: 7, id_ms: 7, id_seq: 0 });
        assert!(moved.shares_bytes_with(&old) && moved.is_ahead_of(&old));
        assert_eq!(moved.bytes(), old.bytes());
        assert!(moved.into_buffer().is_none(), "still shared with `old`");
        let len = old.bytes();
        assert_eq!(old.into_buffer().map(|b| b.len()), Some(len), "the last reference gives the bytes back");
    }
}
