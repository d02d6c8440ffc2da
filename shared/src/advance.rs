//! Bringing a segment forward by journal entries, without the origin: the bits of the keys
//! added since its position set in a copy of its bytes, the header naming the new position and
//! the checksum computed over the result, as the origin would have encoded it.
//!
//! The copy is written into a buffer the caller hands in (cleared first), so a cache that keeps
//! segment-sized allocations can reuse one instead of allocating per catch-up. Only a segment
//! that names a journal position (format version 2) can be brought forward.

use crate::block::{probe_mask, BLOCK_BYTES};
use crate::hash::KeyHash;
use crate::journal::{set_mask, JournalPosition};
use crate::segment::{checksum, Segment, SegmentError, SegmentHeader, SEGMENT_FORMAT_VERSION};
use alloc::vec::Vec;

impl Segment {
    /// This segment current to `journal`: its bytes copied into `buffer` with the bits of every
    /// hash in `hashes` that falls in this segment set (hashes of other segments are skipped, as
    /// a journal chunk's are), the header naming `journal`, the checksum recomputed. The caller
    /// vouches that `hashes` are every entry between the segment's own position and `journal`
    /// (setting bits is idempotent, so entries at or before its position may be among them).
    /// A format-1 segment names no position and is refused.
    pub fn advanced<'h>(
        &self,
        journal: JournalPosition,
        hashes: impl IntoIterator<Item = &'h KeyHash>,
        mut buffer: Vec<u8>,
    ) -> Result<Segment, SegmentError> {
        let header = *self.header();
        if header.journal.is_none() {
            return Err(SegmentError::UnsupportedVersion(SEGMENT_FORMAT_VERSION));
        }
        buffer.clear();
        buffer.extend_from_slice(self.as_bytes());
        let (head, payload) = buffer.split_at_mut(header.header_len());
        let params = header.params;
        for hash in hashes {
            let at = params.locate(hash);
            if at.segment != header.index {
                continue;
            }
            let start = at.byte_offset_in_segment() as usize;
            set_mask(&mut payload[start..start + BLOCK_BYTES], &probe_mask(hash.probe_bits, params.k));
        }
        head[64..72].copy_from_slice(&journal.added.to_le_bytes());
        head[72..80].copy_from_slice(&journal.id_ms.to_le_bytes());
        head[80..88].copy_from_slice(&journal.id_seq.to_le_bytes());
        let sum = checksum(head, payload);
        head[56..64].copy_from_slice(&sum.to_le_bytes());
        let header = SegmentHeader { journal: Some(journal), checksum: sum, ..header };
        Ok(Segment::from_parts(header, buffer))
    }
}

#[cfg(test)]
mod tests {
    use crate::filter::BloomFilter;
    use crate::hash::{hash_key, KeyHash};
    use crate::journal::JournalPosition;
    use crate::params::{Params, SizingOptions};
    use crate::segment::{decode_segment, encode_segment, encode_segment_at, Segment, SegmentError};
    use alloc::vec::Vec;

    fn params() -> Params {
        Params::for_capacity_with(5_000, 0.01, SizingOptions { seed: 4, segment_bytes: 1024 }).unwrap()
    }

    #[test]
    fn a_segment_advanced_by_the_added_hashes_is_the_one_the_origin_would_send() {
        let p = params();
        let mut filter = BloomFilter::new(p);
        for i in 0u32..2_000 {
            filter.insert(&i.to_le_bytes());
        }
        let (from, to) =
            (JournalPosition { added: 10, id_ms: 5, id_seq: 0 }, JournalPosition { added: 60, id_ms: 9, id_seq: 1 });
        let old: Vec<Segment> = (0..p.segment_count)
            .map(|i| {
                Segment::decode(encode_segment_at(&p, 2, i, 1, from, &filter.segment_payload(i)).unwrap()).unwrap()
            })
            .collect();
        let added: Vec<KeyHash> = (10_000u32..10_050).map(|i| hash_key(&i.to_le_bytes(), p.seed)).collect();
        for h in &added {
            filter.insert_hash(h);
        }
        for (i, segment) in old.iter().enumerate() {
            // Every hash offered to every segment: each keeps its own.
            let forward = segment.advanced(to, &added, Vec::new()).unwrap();
            let expected = encode_segment_at(&p, 2, i as u32, 1, to, &filter.segment_payload(i as u32)).unwrap();
            assert_eq!(forward.as_bytes(), expected.as_slice(), "segment {i}");
            assert_eq!(forward.header().journal, Some(to));
            assert_eq!(*decode_segment(forward.as_bytes()).unwrap().header(), *forward.header());
        }
    }

    #[test]
    fn the_buffer_handed_in_is_reused_and_format_1_is_refused() {
        let p = params();
        let payload = BloomFilter::new(p).segment_payload(0);
        let at = JournalPosition { added: 1, id_ms: 1, id_seq: 0 };
        let segment = Segment::decode(encode_segment_at(&p, 1, 0, 1, at, &payload).unwrap()).unwrap();
        let spare = Segment::decode(encode_segment_at(&p, 1, 0, 1, at, &payload).unwrap()).unwrap().into_bytes();
        let spare_ptr = spare.as_ptr();
        let forward = segment.advanced(JournalPosition { added: 2, ..at }, &[], spare).unwrap();
        assert_eq!(forward.as_bytes().as_ptr(), spare_ptr, "no new allocation for a buffer of the right size");
        let v1 = Segment::decode(encode_segment(&p, 1, 0, 1, &payload).unwrap()).unwrap();
        assert_eq!(v1.advanced(at, &[], Vec::new()).unwrap_err(), SegmentError::UnsupportedVersion(1));
    }
}
