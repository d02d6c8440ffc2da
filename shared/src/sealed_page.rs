//! A page of a sealed journal chunk (`sealed_chunk`), as the origin serves it to every isolate
//! under one URL, through shared caches. A sealed chunk never changes, so its pages are fixed:
//! page p holds its hashes from p × [`MAX_PAGE_HASHES`] on. An edge applies every hash of every
//! page of chunks k₀..k to the segments it holds and may then answer "not seen" until
//! `sealed_chunk::answer_no_until_ms` of chunk k; a hash applied twice changes nothing.
//!
//! All integers little-endian:
//!
//! ```text
//! offset size  field
//!  0      4    magic "BGSP"
//!  4      2    format version (1)
//!  6      2    header length (64)
//!  8      8    generation
//! 16      8    hash seed of the generation's params
//! 24      8    chunk number k
//! 32      4    chunk width Δ, ms
//! 36      4    page number p (from 0)
//! 40      4    pages in the chunk (at least 1)
//! 44      4    number of key hashes in this page
//! 48      8    Redis's clock when the page was read, ms (the edge's clock check)
//! 56      8    the generation that superseded this one when the page was read, 0 if none
//! 64      …    the key hashes, 16 bytes each (u64 block_bits, u64 probe_bits)
//! end-8   8    checksum: XXH3-64 of every byte before it
//! ```
//!
//! Decoding checks every length and the checksum before trusting anything: it never panics
//! and allocates nothing beyond the view.

use crate::hash::KeyHash;
use crate::journal::{encode_hash, HASH_BYTES};
use crate::le::{le_u32, le_u64};
use alloc::vec::Vec;
use core::fmt;
use xxhash_rust::xxh3::xxh3_64;

/// First four bytes of every page.
pub const PAGE_MAGIC: [u8; 4] = *b"BGSP";
/// The format this code writes, and the newest it reads.
pub const PAGE_FORMAT_VERSION: u16 = 1;
/// Header size in bytes.
pub const PAGE_HEADER_BYTES: usize = 64;
/// Hashes in a page at most: bounds a response (256 KiB of hashes).
pub const MAX_PAGE_HASHES: u32 = 16_384;

/// A page's header fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PageHeader {
    /// The journal's generation.
    pub generation: u64,
    /// Its params' hash seed.
    pub seed: u64,
    /// The chunk's number.
    pub chunk: u64,
    /// The chunk's width, ms.
    pub width_ms: u32,
    /// This page's number.
    pub page: u32,
    /// Pages in the chunk.
    pub pages: u32,
    /// Redis's clock when the page was read, ms since the Unix epoch.
    pub read_at_ms: u64,
    /// The generation that had superseded this one when the page was read, if any.
    pub superseded_by: Option<u64>,
}

/// Why bytes were refused as a page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PageError {
    /// Fewer bytes than a header and a checksum.
    TooShort,
    /// Not "BGSP".
    BadMagic,
    /// A format this code does not read.
    UnsupportedVersion(u16),
    /// The header length is not 64, or its page numbers cannot be.
    BadHeader,
    /// The checksum does not match the bytes.
    BadChecksum,
    /// The hashes do not add up to the header's count, or a page holds more than a page may.
    Malformed,
}

impl fmt::Display for PageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PageError::TooShort => f.write_str("sealed chunk page is shorter than its header"),
            PageError::BadMagic => f.write_str("not a sealed chunk page (bad magic)"),
            PageError::UnsupportedVersion(v) => write!(f, "sealed chunk page format {v} is not supported"),
            PageError::BadHeader => f.write_str("sealed chunk page header is malformed"),
            PageError::BadChecksum => f.write_str("sealed chunk page checksum does not match"),
            PageError::Malformed => f.write_str("sealed chunk page hashes do not match its header"),
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for PageError {}

/// How many pages a chunk of `hashes` key hashes has (one at least, even empty).
pub fn pages_for(hashes: u64) -> u32 {
    u32::try_from(hashes.div_ceil(u64::from(MAX_PAGE_HASHES)).max(1)).unwrap_or(u32::MAX)
}

/// Encodes a page: the header and its hashes (at most [`MAX_PAGE_HASHES`]).
pub fn encode_page(header: &PageHeader, hashes: &[KeyHash]) -> Vec<u8> {
    let mut out = Vec::with_capacity(PAGE_HEADER_BYTES + hashes.len() * HASH_BYTES + 8);
    out.extend_from_slice(&PAGE_MAGIC);
    out.extend_from_slice(&PAGE_FORMAT_VERSION.to_le_bytes());
    out.extend_from_slice(&(PAGE_HEADER_BYTES as u16).to_le_bytes());
    for field in [header.generation, header.seed, header.chunk] {
        out.extend_from_slice(&field.to_le_bytes());
    }
    for field in [header.width_ms, header.page, header.pages, hashes.len() as u32] {
        out.extend_from_slice(&field.to_le_bytes());
    }
    out.extend_from_slice(&header.read_at_ms.to_le_bytes());
    out.extend_from_slice(&header.superseded_by.unwrap_or(0).to_le_bytes());
    for hash in hashes {
        out.extend_from_slice(&encode_hash(hash));
    }
    let checksum = xxh3_64(&out);
    out.extend_from_slice(&checksum.to_le_bytes());
    out
}

/// A verified page, borrowing its bytes.
#[derive(Clone, Copy, Debug)]
pub struct PageView<'a> {
    /// Its header.
    pub header: PageHeader,
    hashes: &'a [u8],
}

/// Decodes and verifies a page.
pub fn decode_page(bytes: &[u8]) -> Result<PageView<'_>, PageError> {
    if bytes.len() < PAGE_HEADER_BYTES + 8 {
        return Err(PageError::TooShort);
    }
    if bytes[0..4] != PAGE_MAGIC {
        return Err(PageError::BadMagic);
    }
    let version = u16::from_le_bytes([bytes[4], bytes[5]]);
    if version != PAGE_FORMAT_VERSION {
        return Err(PageError::UnsupportedVersion(version));
    }
    let (body, sum) = bytes.split_at(bytes.len() - 8);
    let (page, pages) = (le_u32(body, 36), le_u32(body, 40));
    if usize::from(u16::from_le_bytes([body[6], body[7]])) != PAGE_HEADER_BYTES || pages == 0 || page >= pages {
        return Err(PageError::BadHeader);
    }
    if xxh3_64(body) != le_u64(sum, 0) {
        return Err(PageError::BadChecksum);
    }
    let count = le_u32(body, 44);
    let hashes = &body[PAGE_HEADER_BYTES..];
    if count > MAX_PAGE_HASHES || hashes.len() != count as usize * HASH_BYTES {
        return Err(PageError::Malformed);
    }
    let superseded_by = Some(le_u64(body, 56)).filter(|g| *g != 0);
    let header = PageHeader {
        generation: le_u64(body, 8),
        seed: le_u64(body, 16),
        chunk: le_u64(body, 24),
        width_ms: le_u32(body, 32),
        page,
        pages,
        read_at_ms: le_u64(body, 48),
        superseded_by,
    };
    Ok(PageView { header, hashes })
}

impl<'a> PageView<'a> {
    /// The page's key hashes.
    pub fn hashes(&self) -> impl Iterator<Item = KeyHash> + 'a {
        self.hashes.chunks_exact(HASH_BYTES).map(|c| KeyHash { block_bits: le_u64(c, 0), probe_bits: le_u64(c, 8) })
    }

    /// Number of key hashes.
    pub fn len(&self) -> usize {
        self.hashes.len() / HASH_BYTES
    }

    /// Whether the page holds no hash (a chunk no write landed in).
    pub fn is_empty(&self) -> bool {
        self.hashes.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hash_key;

    fn header() -> PageHeader {
        PageHeader {
            generation: 1_765_000_000_000,
            seed: 42,
            chunk: 7_060_000_000,
            width_ms: 250,
            page: 1,
            pages: 3,
            read_at_ms: 1_765_000_000_500,
            superseded_by: Some(1_765_000_000_400),
        }
    }

    #[test]
    fn a_page_reads_back_as_written() {
        let hashes: Vec<KeyHash> = (0..5u32).map(|i| hash_key(&i.to_le_bytes(), 42)).collect();
        let bytes = encode_page(&header(), &hashes);
        assert_eq!(bytes.len(), PAGE_HEADER_BYTES + 5 * HASH_BYTES + 8);
        let view = decode_page(&bytes).unwrap();
        assert_eq!(view.header, header());
        assert_eq!(view.hashes().collect::<Vec<_>>(), hashes);
        let empty = encode_page(&PageHeader { superseded_by: None, page: 0, pages: 1, ..header() }, &[]);
        let view = decode_page(&empty).unwrap();
        assert!(view.is_empty() && view.header.superseded_by.is_none());
    }

    #[test]
    fn every_damage_is_refused_never_trusted() {
        let hashes = [hash_key(b"k", 42)];
        let good = encode_page(&header(), &hashes);
        assert_eq!(decode_page(&good[..40]).unwrap_err(), PageError::TooShort);
        let mut bad = good.clone();
        bad[0] = b'X';
        assert_eq!(decode_page(&bad).unwrap_err(), PageError::BadMagic);
        let mut newer = good.clone();
        newer[4] = 2;
        assert_eq!(decode_page(&newer).unwrap_err(), PageError::UnsupportedVersion(2));
        let mut flipped = good.clone();
        flipped[PAGE_HEADER_BYTES + 3] ^= 1;
        assert_eq!(decode_page(&flipped).unwrap_err(), PageError::BadChecksum);
        let past_the_end = encode_page(&PageHeader { page: 3, pages: 3, ..header() }, &hashes);
        assert_eq!(decode_page(&past_the_end).unwrap_err(), PageError::BadHeader);
        // A count that disagrees with the bytes, checksum made to match.
        let mut miscounted = good[..good.len() - 8].to_vec();
        miscounted[44] = 2;
        let sum = xxh3_64(&miscounted);
        miscounted.extend_from_slice(&sum.to_le_bytes());
        assert_eq!(decode_page(&miscounted).unwrap_err(), PageError::Malformed);
    }

    #[test]
    fn no_flipped_bit_is_ever_taken_for_another_page() {
        let hashes: Vec<KeyHash> = (0..3u32).map(|i| hash_key(&i.to_le_bytes(), 42)).collect();
        let good = encode_page(&header(), &hashes);
        for at in 0..good.len() {
            for bit in 0..8 {
                let mut damaged = good.clone();
                damaged[at] ^= 1 << bit;
                assert!(decode_page(&damaged).is_err(), "a page with byte {at} bit {bit} flipped was accepted");
            }
        }
        for len in 0..good.len() {
            assert!(decode_page(&good[..len]).is_err(), "cut at {len}");
        }
    }

    #[test]
    fn a_chunk_has_one_page_at_least_and_pages_are_full_but_the_last() {
        assert_eq!(pages_for(0), 1);
        assert_eq!(pages_for(u64::from(MAX_PAGE_HASHES)), 1);
        assert_eq!(pages_for(u64::from(MAX_PAGE_HASHES) + 1), 2);
    }
}
