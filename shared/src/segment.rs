//! The segment wire format: one slice of the filter's bits with a header that says exactly
//! which slice of which filter it is, and a checksum over both.
//!
//! ```text
//! offset size  field (little-endian)
//!  0      4    magic "BGSG"
//!  4      2    format version (1)
//!  6      2    header length (64)
//!  8      8    hash seed
//! 16      1    k
//! 17      1    log2(blocks per segment)
//! 18      2    reserved, zero
//! 20      4    segment count of the filter
//! 24      8    generation
//! 32      4    segment index
//! 36      4    reserved, zero
//! 40      8    segment version (bumped by every add that changed a bit)
//! 48      4    payload length in bytes (= 64 << log2(blocks per segment))
//! 52      4    reserved, zero
//! 56      8    checksum: XXH3-64(payload, seed = XXH3-64(bytes 0..56))
//! 64      …    payload: the segment's blocks, 64 bytes each, bits MSB-first as in Redis
//! ```
//!
//! Format version 2 (header length 96) also names the insert-journal position the bits are
//! current to (see [`journal`](crate::journal)), under the same checksum:
//!
//! ```text
//! 64      8    journal position: entries added
//! 72      8    journal position: stream id, milliseconds part
//! 80      8    journal position: stream id, sequence part
//! 88      8    reserved, zero
//! 96      …    payload
//! ```
//!
//! The checksum of version 2 is XXH3-64(payload, seed = XXH3-64(bytes 0..56 ++ bytes 64..96)).
//!
//! Decoding checks every field before trusting any: it never panics, never allocates, and
//! refuses a segment whose length, params or checksum do not add up.

use crate::block::{probe_mask, BLOCK_BYTES};
use crate::hash::{hash_key, KeyHash};
use crate::journal::JournalPosition;
use crate::le::{le_u16, le_u32, le_u64};
use crate::params::{Params, ParamsError};
use alloc::vec::Vec;
use core::fmt;
use xxhash_rust::xxh3::{xxh3_64, xxh3_64_with_seed};

/// First four bytes of every segment.
pub const SEGMENT_MAGIC: [u8; 4] = *b"BGSG";
/// The format version without a journal position.
pub const SEGMENT_FORMAT_VERSION: u16 = 1;
/// Header size in bytes of format version 1.
pub const SEGMENT_HEADER_BYTES: usize = 64;
/// The format version that carries the journal position the bits are current to.
pub const SEGMENT_FORMAT_VERSION_JOURNAL: u16 = 2;
/// Header size in bytes of format version 2.
pub const SEGMENT_HEADER_BYTES_JOURNAL: usize = 96;

/// The decoded header of a segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SegmentHeader {
    /// Parameters of the filter the segment belongs to.
    pub params: Params,
    /// Generation of the filter's bits.
    pub generation: u64,
    /// Which segment this is.
    pub index: u32,
    /// Version of this segment's bits; higher is newer within a generation.
    pub version: u64,
    /// The checksum stored in (and verified against) the header.
    pub checksum: u64,
    /// The insert-journal position the bits are current to (format version 2 only).
    pub journal: Option<JournalPosition>,
}

impl SegmentHeader {
    /// Bytes before the payload.
    pub fn header_len(&self) -> usize {
        if self.journal.is_some() {
            SEGMENT_HEADER_BYTES_JOURNAL
        } else {
            SEGMENT_HEADER_BYTES
        }
    }
}

/// Why bytes were refused as a segment.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum SegmentError {
    /// Fewer bytes than a header.
    TooShort {
        /// Bytes received.
        len: usize,
    },
    /// The magic is not "BGSG".
    BadMagic,
    /// A format version this code does not read.
    UnsupportedVersion(u16),
    /// The header-length field is not 64.
    BadHeaderLength(u16),
    /// A reserved field is not zero.
    ReservedNotZero,
    /// The filter parameters in the header are invalid.
    BadParams(ParamsError),
    /// The segment index is not below the segment count.
    IndexOutOfRange {
        /// Index in the header.
        index: u32,
        /// Segment count in the header.
        count: u32,
    },
    /// Payload length disagrees with the params, or with the bytes received.
    LengthMismatch {
        /// Payload length the params require.
        expected: usize,
        /// Payload length found.
        found: usize,
    },
    /// Checksum mismatch: the bytes were damaged or tampered with.
    ChecksumMismatch,
}

impl fmt::Display for SegmentError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SegmentError::TooShort { len } => {
                write!(f, "segment is {len} bytes, shorter than its {SEGMENT_HEADER_BYTES}-byte header")
            }
            SegmentError::BadMagic => f.write_str("not a bloomgate segment (bad magic)"),
            SegmentError::UnsupportedVersion(v) => {
                write!(f, "segment format version {v} is not supported (this build reads 1 and 2)")
            }
            SegmentError::BadHeaderLength(n) => {
                write!(f, "segment header length {n} does not match its format version")
            }
            SegmentError::ReservedNotZero => f.write_str("segment header has non-zero reserved bytes"),
            SegmentError::BadParams(e) => {
                write!(f, "segment header has invalid filter parameters: {e}")
            }
            SegmentError::IndexOutOfRange { index, count } => {
                write!(f, "segment index {index} is out of range for {count} segments")
            }
            SegmentError::LengthMismatch { expected, found } => {
                write!(f, "segment payload is {found} bytes, expected {expected}")
            }
            SegmentError::ChecksumMismatch => {
                f.write_str("segment checksum mismatch: bytes damaged in transit or storage")
            }
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for SegmentError {}

/// A key that belongs to another segment was tested against this one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WrongSegment {
    /// The segment that holds the key.
    pub expected: u32,
    /// The segment it was tested against.
    pub actual: u32,
}

/// Encodes a segment: header followed by `payload`, which must be exactly
/// `params.segment_bytes()` long and `index < params.segment_count`.
pub fn encode_segment(
    params: &Params,
    generation: u64,
    index: u32,
    version: u64,
    payload: &[u8],
) -> Result<Vec<u8>, SegmentError> {
    encode(params, generation, index, version, None, payload)
}

/// [`encode_segment`] in format version 2, naming the journal position `journal` the bits are
/// current to.
pub fn encode_segment_at(
    params: &Params,
    generation: u64,
    index: u32,
    version: u64,
    journal: JournalPosition,
    payload: &[u8],
) -> Result<Vec<u8>, SegmentError> {
    encode(params, generation, index, version, Some(journal), payload)
}

fn encode(
    params: &Params,
    generation: u64,
    index: u32,
    version: u64,
    journal: Option<JournalPosition>,
    payload: &[u8],
) -> Result<Vec<u8>, SegmentError> {
    let expected = params.segment_bytes() as usize;
    if payload.len() != expected {
        return Err(SegmentError::LengthMismatch { expected, found: payload.len() });
    }
    if index >= params.segment_count {
        return Err(SegmentError::IndexOutOfRange { index, count: params.segment_count });
    }
    let (format, header_len) = match journal {
        None => (SEGMENT_FORMAT_VERSION, SEGMENT_HEADER_BYTES),
        Some(_) => (SEGMENT_FORMAT_VERSION_JOURNAL, SEGMENT_HEADER_BYTES_JOURNAL),
    };
    let mut header = [0u8; SEGMENT_HEADER_BYTES_JOURNAL];
    header[0..4].copy_from_slice(&SEGMENT_MAGIC);
    header[4..6].copy_from_slice(&format.to_le_bytes());
    header[6..8].copy_from_slice(&(header_len as u16).to_le_bytes());
    header[8..16].copy_from_slice(&params.seed.to_le_bytes());
    header[16] = params.k;
    header[17] = params.segment_blocks_log2;
    header[20..24].copy_from_slice(&params.segment_count.to_le_bytes());
    header[24..32].copy_from_slice(&generation.to_le_bytes());
    header[32..36].copy_from_slice(&index.to_le_bytes());
    header[40..48].copy_from_slice(&version.to_le_bytes());
    header[48..52].copy_from_slice(&(expected as u32).to_le_bytes());
    if let Some(at) = journal {
        header[64..72].copy_from_slice(&at.added.to_le_bytes());
        header[72..80].copy_from_slice(&at.id_ms.to_le_bytes());
        header[80..88].copy_from_slice(&at.id_seq.to_le_bytes());
    }
    let header = &mut header[..header_len];
    let checksum = checksum(header, payload);
    header[56..64].copy_from_slice(&checksum.to_le_bytes());
    let mut out = Vec::with_capacity(header_len + expected);
    out.extend_from_slice(header);
    out.extend_from_slice(payload);
    Ok(out)
}

/// The checksum of a header (its checksum field excluded) and payload.
pub(crate) fn checksum(header: &[u8], payload: &[u8]) -> u64 {
    let seed = if header.len() == SEGMENT_HEADER_BYTES {
        xxh3_64(&header[..56])
    } else {
        let mut covered = [0u8; SEGMENT_HEADER_BYTES_JOURNAL - 8];
        covered[..56].copy_from_slice(&header[..56]);
        covered[56..].copy_from_slice(&header[64..SEGMENT_HEADER_BYTES_JOURNAL]);
        xxh3_64(&covered)
    };
    xxh3_64_with_seed(payload, seed)
}

/// Decodes and verifies a segment (either format version), borrowing its payload.
pub fn decode_segment(bytes: &[u8]) -> Result<SegmentView<'_>, SegmentError> {
    let header = bytes.get(..SEGMENT_HEADER_BYTES).ok_or(SegmentError::TooShort { len: bytes.len() })?;
    if header[0..4] != SEGMENT_MAGIC {
        return Err(SegmentError::BadMagic);
    }
    let format = le_u16(header, 4);
    let header_len = match format {
        SEGMENT_FORMAT_VERSION => SEGMENT_HEADER_BYTES,
        SEGMENT_FORMAT_VERSION_JOURNAL => SEGMENT_HEADER_BYTES_JOURNAL,
        other => return Err(SegmentError::UnsupportedVersion(other)),
    };
    let declared_len = le_u16(header, 6);
    if usize::from(declared_len) != header_len {
        return Err(SegmentError::BadHeaderLength(declared_len));
    }
    let header = bytes.get(..header_len).ok_or(SegmentError::TooShort { len: bytes.len() })?;
    if header[18..20] != [0, 0] || header[36..40] != [0; 4] || header[52..56] != [0; 4] {
        return Err(SegmentError::ReservedNotZero);
    }
    let journal = if header_len == SEGMENT_HEADER_BYTES_JOURNAL {
        if header[88..96] != [0; 8] {
            return Err(SegmentError::ReservedNotZero);
        }
        Some(JournalPosition { added: le_u64(header, 64), id_ms: le_u64(header, 72), id_seq: le_u64(header, 80) })
    } else {
        None
    };
    let params =
        Params::new(le_u64(header, 8), header[16], header[17], le_u32(header, 20)).map_err(SegmentError::BadParams)?;
    let index = le_u32(header, 32);
    if index >= params.segment_count {
        return Err(SegmentError::IndexOutOfRange { index, count: params.segment_count });
    }
    let expected = params.segment_bytes() as usize;
    let declared = le_u32(header, 48) as usize;
    if declared != expected {
        return Err(SegmentError::LengthMismatch { expected, found: declared });
    }
    let payload = &bytes[header_len..];
    if payload.len() != expected {
        return Err(SegmentError::LengthMismatch { expected, found: payload.len() });
    }
    let stored = le_u64(header, 56);
    if checksum(header, payload) != stored {
        return Err(SegmentError::ChecksumMismatch);
    }
    let header = SegmentHeader {
        params,
        generation: le_u64(header, 24),
        index,
        version: le_u64(header, 40),
        checksum: stored,
        journal,
    };
    Ok(SegmentView { header, payload })
}

/// A verified segment, borrowed: answers `may_contain` for the keys that live in it, from its
/// bytes alone. This is what the edge holds.
#[derive(Clone, Copy, Debug)]
pub struct SegmentView<'a> {
    header: SegmentHeader,
    payload: &'a [u8],
}

impl<'a> SegmentView<'a> {
    /// The decoded header.
    pub fn header(&self) -> &SegmentHeader {
        &self.header
    }

    /// The payload bytes.
    pub fn payload(&self) -> &'a [u8] {
        self.payload
    }

    /// Tests a key already hashed with the segment's seed. Errs if the key lives in another
    /// segment: a caller that picked the wrong segment must not get a "no".
    pub fn may_contain_hash(&self, hash: &KeyHash) -> Result<bool, WrongSegment> {
        let params = &self.header.params;
        let at = params.locate(hash);
        if at.segment != self.header.index {
            return Err(WrongSegment { expected: at.segment, actual: self.header.index });
        }
        let start = at.byte_offset_in_segment() as usize;
        let mut block = [0u8; BLOCK_BYTES];
        block.copy_from_slice(&self.payload[start..start + BLOCK_BYTES]);
        Ok(crate::block::bytes_contain(&block, &probe_mask(hash.probe_bits, params.k)))
    }

    /// Tests a normalised key.
    pub fn may_contain(&self, key: &[u8]) -> Result<bool, WrongSegment> {
        self.may_contain_hash(&hash_key(key, self.header.params.seed))
    }
}

/// A verified segment that owns its bytes, for caches: verify once on arrival, then answer
/// lookups from [`view`](Self::view) without re-checking.
#[derive(Clone, Debug)]
pub struct Segment {
    header: SegmentHeader,
    bytes: Vec<u8>,
}

impl Segment {
    /// Verifies `bytes` and keeps them.
    pub fn decode(bytes: Vec<u8>) -> Result<Segment, SegmentError> {
        let header = *decode_segment(&bytes)?.header();
        Ok(Segment { header, bytes })
    }

    /// The decoded header.
    pub fn header(&self) -> &SegmentHeader {
        &self.header
    }

    /// The encoded bytes, header included.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// A view for lookups.
    pub fn view(&self) -> SegmentView<'_> {
        SegmentView { header: self.header, payload: &self.bytes[self.header.header_len()..] }
    }

    /// The bytes, given back: a cache can keep the allocation for the next segment of this size.
    pub fn into_bytes(self) -> Vec<u8> {
        self.bytes
    }

    /// A segment from parts the caller has just made consistent (`advance`).
    pub(crate) fn from_parts(header: SegmentHeader, bytes: Vec<u8>) -> Segment {
        Segment { header, bytes }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::filter::BloomFilter;
    use crate::params::SizingOptions;

    fn small_filter() -> BloomFilter {
        let opts = SizingOptions { seed: 9, segment_bytes: 1024 };
        let mut f = BloomFilter::new(Params::for_capacity_with(5_000, 0.01, opts).unwrap());
        for i in 0u32..5_000 {
            f.insert(&i.to_le_bytes());
        }
        f
    }

    fn encoded(f: &BloomFilter, index: u32) -> Vec<u8> {
        encode_segment(f.params(), 3, index, 77, &f.segment_payload(index)).unwrap()
    }

    #[test]
    fn segments_answer_like_the_whole_filter() {
        let f = small_filter();
        let segments: Vec<Vec<u8>> = (0..f.params().segment_count).map(|i| encoded(&f, i)).collect();
        for i in 0u32..20_000 {
            let key = i.to_le_bytes();
            let seg = f.params().locate(&hash_key(&key, 9)).segment;
            let view = decode_segment(&segments[seg as usize]).unwrap();
            assert_eq!(view.may_contain(&key), Ok(f.may_contain(&key)));
            let other = (seg + 1) % f.params().segment_count;
            assert!(decode_segment(&segments[other as usize]).unwrap().may_contain(&key).is_err());
        }
    }

    #[test]
    fn header_round_trips() {
        let f = small_filter();
        let seg = Segment::decode(encoded(&f, 1)).unwrap();
        let h = seg.header();
        assert_eq!((h.params, h.generation, h.index, h.version), (*f.params(), 3, 1, 77));
        assert_eq!(seg.view().payload(), &f.segment_payload(1)[..]);
    }

    #[test]
    fn every_rejection_path() {
        let f = small_filter();
        let good = encoded(&f, 0);
        let with = |at: usize, bytes: &[u8]| {
            let mut b = good.clone();
            b[at..at + bytes.len()].copy_from_slice(bytes);
            b
        };
        assert_eq!(decode_segment(&good[..10]).unwrap_err(), SegmentError::TooShort { len: 10 });
        assert_eq!(decode_segment(&with(0, b"XXXX")).unwrap_err(), SegmentError::BadMagic);
        assert_eq!(decode_segment(&with(4, &[3, 0])).unwrap_err(), SegmentError::UnsupportedVersion(3));
        assert_eq!(
            decode_segment(&with(4, &[2, 0])).unwrap_err(),
            SegmentError::BadHeaderLength(64),
            "version 2 says 96"
        );
        assert_eq!(decode_segment(&with(6, &[65, 0])).unwrap_err(), SegmentError::BadHeaderLength(65));
        assert_eq!(decode_segment(&with(18, &[1])).unwrap_err(), SegmentError::ReservedNotZero);
        assert!(matches!(decode_segment(&with(16, &[0])).unwrap_err(), SegmentError::BadParams(_)));
        assert!(matches!(decode_segment(&with(32, &[0xff; 4])).unwrap_err(), SegmentError::IndexOutOfRange { .. }));
        assert!(matches!(decode_segment(&with(48, &[1, 0, 0, 0])).unwrap_err(), SegmentError::LengthMismatch { .. }));
        assert!(matches!(decode_segment(&good[..good.len() - 1]).unwrap_err(), SegmentError::LengthMismatch { .. }));
        let mut flipped = good.clone();
        *flipped.last_mut().unwrap() ^= 1;
        assert_eq!(decode_segment(&flipped).unwrap_err(), SegmentError::ChecksumMismatch);
        assert_eq!(decode_segment(&with(40, &[78])).unwrap_err(), SegmentError::ChecksumMismatch);
        assert!(encode_segment(f.params(), 0, 0, 0, &[0u8; 3]).is_err());
        assert!(encode_segment(f.params(), 0, f.params().segment_count, 0, &f.segment_payload(0)).is_err());
    }

    #[test]
    fn version_2_carries_the_journal_position_under_the_checksum() {
        let f = small_filter();
        let at = JournalPosition { added: 41, id_ms: 1_700_000_000_123, id_seq: 2 };
        let bytes = encode_segment_at(f.params(), 3, 1, 77, at, &f.segment_payload(1)).unwrap();
        assert_eq!(bytes.len(), SEGMENT_HEADER_BYTES_JOURNAL + f.params().segment_bytes() as usize);
        let view = decode_segment(&bytes).unwrap();
        assert_eq!(view.header().journal, Some(at));
        assert_eq!(view.payload(), f.segment_payload(1).as_slice());
        let owned = Segment::decode(bytes.clone()).unwrap();
        assert_eq!(owned.view().payload(), f.segment_payload(1).as_slice());
        // Every byte of the position is covered by the checksum.
        for i in 64..96 {
            let mut bad = bytes.clone();
            bad[i] ^= 1;
            assert!(decode_segment(&bad).is_err(), "byte {i} changed unnoticed");
        }
        assert_eq!(decode_segment(&encoded(&f, 1)).unwrap().header().journal, None, "version 1 still reads");
    }
}
