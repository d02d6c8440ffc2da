//! The insert journal: what an edge needs to bring the segments it holds up to date, at a cost
//! proportional to the writes since, not to the filter's size.
//!
//! Every add also appends the added keys' hashes to its generation's journal, after the bits
//! are set and before the write is acknowledged. Entries are numbered by a contiguous count
//! (`added`: how many entries the journal has ever had). Bits only get set within a generation,
//! so applying an entry is idempotent and order-free: ORing an entry into a segment twice, or
//! into a segment that already had its bits, changes nothing.
//!
//! A segment copy is *current to* position P when it holds every entry up to P. The origin
//! reads the journal's head before it reads a segment's bits (an entry's bits are set before it
//! is appended, so the bits read after include every entry up to that head), and a manifest
//! names the head read after the edge asked for it (so it covers every key acknowledged before
//! the ask). A copy current to P plus the entries in (P, head] answers "no" exactly as a fresh
//! copy would.
//!
//! The chunk the origin sends (all integers little-endian):
//!
//! ```text
//! offset size  field
//!  0      4    magic "BGJL"
//!  4      2    format version (1)
//!  6      2    header length (64)
//!  8      8    generation
//! 16      8    hash seed of the generation's params
//! 24      8    from: `added` position the entries follow (exclusive)
//! 32      8    to: `added` position of the last entry (= from + entry count)
//! 40      8    to: stream id of the last entry, milliseconds part
//! 48      8    to: stream id of the last entry, sequence part
//! 56      4    number of key hashes in all entries
//! 60      4    reserved, zero
//! 64      …    entries, each: u32 hash count n, then n × (u64 block_bits, u64 probe_bits)
//! end-8   8    checksum: XXH3-64 of every byte before it
//! ```
//!
//! Decoding checks every length and the checksum before trusting any entry: it never panics and
//! allocates nothing beyond the view.

use crate::block::{probe_mask, BLOCK_BYTES};
use crate::hash::KeyHash;
use crate::le::{le_u32, le_u64};
use crate::params::Params;
use alloc::vec::Vec;
use core::fmt;
use xxhash_rust::xxh3::xxh3_64;

/// First four bytes of every journal chunk.
pub const JOURNAL_MAGIC: [u8; 4] = *b"BGJL";
/// The only format version this code writes and reads.
pub const JOURNAL_FORMAT_VERSION: u16 = 1;
/// Header size in bytes.
pub const JOURNAL_HEADER_BYTES: usize = 64;
/// Bytes of one key hash in an entry.
pub const HASH_BYTES: usize = 16;

/// A position in a generation's journal.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
pub struct JournalPosition {
    /// Entries the journal had ever had at this position (contiguous: the next entry is
    /// `added + 1`). Comparisons order positions by this first.
    pub added: u64,
    /// The stream id of the entry at this position (milliseconds part; 0 before any entry).
    pub id_ms: u64,
    /// The stream id's sequence part.
    pub id_seq: u64,
}

impl JournalPosition {
    /// The stream id, as Redis writes it (`ms-seq`).
    pub fn stream_id(&self) -> alloc::string::String {
        alloc::format!("{}-{}", self.id_ms, self.id_seq)
    }
}

/// Why bytes were refused as a journal chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JournalError {
    /// Fewer bytes than a header and a checksum.
    TooShort,
    /// Not "BGJL".
    BadMagic,
    /// A format version this code does not read.
    UnsupportedVersion(u16),
    /// The header length is not 64, or a reserved field is not zero.
    BadHeader,
    /// The checksum does not match the bytes.
    BadChecksum,
    /// The entries do not add up: lengths, counts or positions disagree with the header.
    Malformed,
    /// A chunk of another generation or seed than the segments it is applied to.
    WrongFilter,
}

impl fmt::Display for JournalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JournalError::TooShort => f.write_str("journal chunk is shorter than its header"),
            JournalError::BadMagic => f.write_str("not a journal chunk (bad magic)"),
            JournalError::UnsupportedVersion(v) => write!(f, "journal format version {v} is not supported"),
            JournalError::BadHeader => f.write_str("journal chunk header is malformed"),
            JournalError::BadChecksum => f.write_str("journal chunk checksum does not match"),
            JournalError::Malformed => f.write_str("journal chunk entries do not match its header"),
            JournalError::WrongFilter => f.write_str("journal chunk is for another generation or seed"),
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for JournalError {}

/// Encodes a chunk: the entries following `from`, ending at `to` (`to.added` must be
/// `from + entries.len()`); each entry is the hashes one add appended.
pub fn encode_journal(generation: u64, seed: u64, from: u64, to: JournalPosition, entries: &[Vec<KeyHash>]) -> Vec<u8> {
    let hashes: usize = entries.iter().map(Vec::len).sum();
    let mut out = Vec::with_capacity(JOURNAL_HEADER_BYTES + entries.len() * 4 + hashes * HASH_BYTES + 8);
    out.extend_from_slice(&JOURNAL_MAGIC);
    out.extend_from_slice(&JOURNAL_FORMAT_VERSION.to_le_bytes());
    out.extend_from_slice(&(JOURNAL_HEADER_BYTES as u16).to_le_bytes());
    for field in [generation, seed, from, to.added, to.id_ms, to.id_seq] {
        out.extend_from_slice(&field.to_le_bytes());
    }
    out.extend_from_slice(&(hashes as u32).to_le_bytes());
    out.extend_from_slice(&[0; 4]);
    for entry in entries {
        out.extend_from_slice(&(entry.len() as u32).to_le_bytes());
        for hash in entry {
            out.extend_from_slice(&encode_hash(hash));
        }
    }
    let checksum = xxh3_64(&out);
    out.extend_from_slice(&checksum.to_le_bytes());
    out
}

/// One hash as an entry stores it (what the origin appends to Redis, too).
pub fn encode_hash(hash: &KeyHash) -> [u8; HASH_BYTES] {
    let mut out = [0u8; HASH_BYTES];
    out[..8].copy_from_slice(&hash.block_bits.to_le_bytes());
    out[8..].copy_from_slice(&hash.probe_bits.to_le_bytes());
    out
}

/// The hashes of one entry as stored: a whole number of [`HASH_BYTES`], else None.
pub fn decode_hashes(bytes: &[u8]) -> Option<impl Iterator<Item = KeyHash> + '_> {
    if !bytes.len().is_multiple_of(HASH_BYTES) {
        return None;
    }
    Some(bytes.chunks_exact(HASH_BYTES).map(|c| KeyHash { block_bits: le_u64(c, 0), probe_bits: le_u64(c, 8) }))
}

/// A verified chunk, borrowing its bytes.
#[derive(Clone, Copy, Debug)]
pub struct JournalView<'a> {
    /// Generation of the journal.
    pub generation: u64,
    /// Hash seed of that generation.
    pub seed: u64,
    /// The position the entries follow.
    pub from: u64,
    /// The position of the last entry.
    pub to: JournalPosition,
    entries: &'a [u8],
    entry_count: u64,
}

/// Decodes and verifies a chunk.
pub fn decode_journal(bytes: &[u8]) -> Result<JournalView<'_>, JournalError> {
    if bytes.len() < JOURNAL_HEADER_BYTES + 8 {
        return Err(JournalError::TooShort);
    }
    if bytes[0..4] != JOURNAL_MAGIC {
        return Err(JournalError::BadMagic);
    }
    let version = u16::from_le_bytes([bytes[4], bytes[5]]);
    if version != JOURNAL_FORMAT_VERSION {
        return Err(JournalError::UnsupportedVersion(version));
    }
    if usize::from(u16::from_le_bytes([bytes[6], bytes[7]])) != JOURNAL_HEADER_BYTES || bytes[60..64] != [0; 4] {
        return Err(JournalError::BadHeader);
    }
    let (body, sum) = bytes.split_at(bytes.len() - 8);
    if xxh3_64(body) != le_u64(sum, 0) {
        return Err(JournalError::BadChecksum);
    }
    let from = le_u64(body, 24);
    let to = JournalPosition { added: le_u64(body, 32), id_ms: le_u64(body, 40), id_seq: le_u64(body, 48) };
    let hashes = u64::from(le_u32(body, 56));
    let entries = &body[JOURNAL_HEADER_BYTES..];
    // Walk the entries once: every length must fit, and the totals must match the header.
    let (mut at, mut count, mut seen) = (0usize, 0u64, 0u64);
    while at < entries.len() {
        let n = entries.get(at..at + 4).map(|b| u64::from(le_u32(b, 0))).ok_or(JournalError::Malformed)?;
        let len = usize::try_from(n).ok().and_then(|n| n.checked_mul(HASH_BYTES)).ok_or(JournalError::Malformed)?;
        at = at.checked_add(4 + len).filter(|end| *end <= entries.len()).ok_or(JournalError::Malformed)?;
        count += 1;
        seen += n;
    }
    if seen != hashes || to.added.checked_sub(from) != Some(count) {
        return Err(JournalError::Malformed);
    }
    Ok(JournalView { generation: le_u64(body, 8), seed: le_u64(body, 16), from, to, entries, entry_count: count })
}

impl<'a> JournalView<'a> {
    /// Number of entries.
    pub fn len(&self) -> u64 {
        self.entry_count
    }

    /// Whether the chunk has no entries (the journal had nothing after `from`).
    pub fn is_empty(&self) -> bool {
        self.entry_count == 0
    }

    /// Each entry's position (`added`) and hashes, in journal order.
    pub fn entries(&self) -> impl Iterator<Item = (u64, impl Iterator<Item = KeyHash> + 'a)> + 'a {
        let bytes = self.entries;
        let mut at = 0usize;
        let mut position = self.from;
        core::iter::from_fn(move || {
            if at >= bytes.len() {
                return None;
            }
            // Lengths were checked by `decode_journal`.
            let n = le_u32(bytes, at) as usize;
            let hashes = &bytes[at + 4..at + 4 + n * HASH_BYTES];
            at += 4 + n * HASH_BYTES;
            position += 1;
            let iter =
                hashes.chunks_exact(HASH_BYTES).map(|c| KeyHash { block_bits: le_u64(c, 0), probe_bits: le_u64(c, 8) });
            Some((position, iter))
        })
    }

    /// ORs into `payload` (segment `index` of a generation with `params`) the bits of every
    /// entry after position `current_to`, and returns the position the payload is then current
    /// to. Refuses a chunk of another generation or seed, a payload of the wrong size, and a
    /// chunk that does not reach back to `current_to` (`from > current_to`: entries would be
    /// missing in between).
    pub fn apply(
        &self,
        generation: u64,
        params: &Params,
        index: u32,
        current_to: u64,
        payload: &mut [u8],
    ) -> Result<u64, JournalError> {
        if self.generation != generation || self.seed != params.seed {
            return Err(JournalError::WrongFilter);
        }
        if payload.len() as u64 != params.segment_bytes() || index >= params.segment_count {
            return Err(JournalError::WrongFilter);
        }
        if self.from > current_to {
            return Err(JournalError::Malformed);
        }
        for (position, hashes) in self.entries() {
            if position <= current_to {
                continue;
            }
            for hash in hashes {
                let at = params.locate(&hash);
                if at.segment != index {
                    continue;
                }
                let start = at.byte_offset_in_segment() as usize;
                let block = &mut payload[start..start + BLOCK_BYTES];
                let mask = probe_mask(hash.probe_bits, params.k);
                set_mask(block, &mask);
            }
        }
        Ok(self.to.added.max(current_to))
    }
}

/// ORs `mask` (the words a key sets in its block) into a block's stored bytes: word i is bytes
/// 8i..8i+8, big-endian, as the block module reads them (`words_from_bytes`).
pub(crate) fn set_mask(block: &mut [u8], mask: &[u64; 8]) {
    for (bytes, m) in block.chunks_exact_mut(8).zip(mask) {
        for (byte, bit) in bytes.iter_mut().zip(m.to_be_bytes()) {
            *byte |= bit;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::filter::BloomFilter;
    use crate::hash::hash_key;
    use crate::params::SizingOptions;

    fn params() -> Params {
        Params::for_capacity_with(20_000, 0.01, SizingOptions { seed: 11, segment_bytes: 1024 }).unwrap()
    }

    fn key(i: u32) -> [u8; 4] {
        i.to_le_bytes()
    }

    #[test]
    fn a_copy_plus_the_journal_answers_as_the_filter_does() {
        let p = params();
        let mut filter = BloomFilter::new(p);
        for i in 0..5_000 {
            filter.insert(&key(i));
        }
        let snapshot: Vec<Vec<u8>> = (0..p.segment_count).map(|s| filter.segment_payload(s)).collect();
        // 40 adds of 25 keys after the snapshot, journalled as positions 101..=140.
        let entries: Vec<Vec<KeyHash>> =
            (0..40).map(|e| (0..25).map(|j| hash_key(&key(5_000 + e * 25 + j), p.seed)).collect()).collect();
        for i in 5_000..6_000 {
            filter.insert(&key(i));
        }
        let to = JournalPosition { added: 140, id_ms: 9, id_seq: 1 };
        let chunk = encode_journal(7, p.seed, 100, to, &entries);
        let view = decode_journal(&chunk).unwrap();
        assert_eq!((view.from, view.to, view.len()), (100, to, 40));
        for s in 0..p.segment_count {
            let mut payload = snapshot[s as usize].clone();
            assert_eq!(view.apply(7, &p, s, 100, &mut payload), Ok(140));
            assert_eq!(payload, filter.segment_payload(s), "segment {s}");
            // Applying again, or from a later position, changes nothing: bits only get set.
            let again = payload.clone();
            assert_eq!(view.apply(7, &p, s, 120, &mut payload), Ok(140));
            assert_eq!(payload, again);
        }
    }

    #[test]
    fn a_chunk_that_does_not_reach_back_or_is_for_another_filter_is_refused() {
        let p = params();
        let chunk = encode_journal(7, p.seed, 100, JournalPosition { added: 101, ..Default::default() }, &[vec![]]);
        let view = decode_journal(&chunk).unwrap();
        let mut payload = vec![0u8; p.segment_bytes() as usize];
        assert_eq!(view.apply(7, &p, 0, 99, &mut payload), Err(JournalError::Malformed), "entry 100 would be missing");
        assert_eq!(view.apply(8, &p, 0, 100, &mut payload), Err(JournalError::WrongFilter));
        assert_eq!(view.apply(7, &p, 0, 100, &mut payload[1..]), Err(JournalError::WrongFilter));
    }

    #[test]
    fn damaged_chunks_are_refused_never_misread() {
        let p = params();
        let entries = vec![vec![hash_key(b"a", p.seed)], vec![hash_key(b"b", p.seed), hash_key(b"c", p.seed)]];
        let chunk = encode_journal(7, p.seed, 5, JournalPosition { added: 7, id_ms: 1, id_seq: 2 }, &entries);
        assert!(decode_journal(&chunk).is_ok());
        for i in 0..chunk.len() {
            let mut bad = chunk.clone();
            bad[i] ^= 0x40;
            assert!(decode_journal(&bad).is_err(), "a flipped bit at byte {i} was accepted");
        }
        for len in 0..chunk.len() {
            assert!(decode_journal(&chunk[..len]).is_err(), "a chunk cut to {len} bytes was accepted");
        }
        // A header that claims more entries than it carries.
        let lying = encode_journal(7, p.seed, 5, JournalPosition { added: 9, id_ms: 1, id_seq: 2 }, &entries);
        assert_eq!(decode_journal(&lying).unwrap_err(), JournalError::Malformed);
    }

    #[test]
    fn hashes_round_trip_as_stored() {
        let h = hash_key(b"key", 3);
        let stored = encode_hash(&h);
        assert_eq!(decode_hashes(&stored).unwrap().collect::<Vec<_>>(), [h]);
        assert!(decode_hashes(&stored[1..]).is_none());
    }
}
