//! A Cache API entry as the edge writes it: its content (a segment) behind a header that names
//! the entry's format and carries an HMAC-SHA256 over that header, the entry's cache key and
//! the content.
//!
//! Everything that runs on the zone shares the Cache API, so an entry is not trusted for being
//! there. A segment's own checksum shows its bytes are undamaged, not who wrote them: anyone
//! can encode a segment that claims a journal position far ahead of the origin's, and the edge
//! would answer "no" from it for keys the origin has acknowledged. The MAC's key is derived
//! from the edge secret ([`EntryKey::derive`]), so only a holder of the secret writes an entry
//! the edge accepts; and the cache key is under the MAC, so a genuine entry copied to another
//! key (another filter, generation, segment or version) is refused as well.
//!
//! ```text
//! offset size  field (little-endian)
//!  0      4    magic "BGCE"
//!  4      2    entry format version (1)
//!  6      2    header length (48)
//!  8      4    content length in bytes
//! 12      4    reserved, zero
//! 16     32    MAC: HMAC-SHA256(entry key, bytes 0..16 ++ cache key length (u32) ++ cache key
//!              ++ content)
//! 48      …    content: a segment as the filter core encodes it, its own header (generation,
//!              index, version, journal position) and checksum included
//! ```
//!
//! Opening an entry ([`EntryHeader::read`], then [`EntryHeader::verify`]; [`open`] does both)
//! refuses anything else ([`EntryRefused`]): bytes without this header (a bare segment, as
//! older edges stored them), another format version (a later
//! format is refused, not guessed at), a length that does not add up, or a MAC that does not
//! verify. The caller treats a refused entry as a cache miss.

use core::fmt;
use hmac::{Hmac, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// First four bytes of every entry.
pub const ENTRY_MAGIC: [u8; 4] = *b"BGCE";
/// The entry format this code writes, and the only one it reads.
pub const ENTRY_FORMAT_VERSION: u16 = 1;
/// Bytes before an entry's content.
pub const ENTRY_HEADER_BYTES: usize = 48;
/// The key is HMAC-SHA256(edge secret, this label): another label, another key, so a later
/// scheme never shares keys with this one.
pub const ENTRY_KEY_LABEL: &[u8] = b"bloomgate cache-entry key v1";

/// The header's fields before the MAC, all of them under it.
const FIELDS: usize = 16;

/// The key Cache API entries are authenticated with, derived from the edge secret once per
/// isolate. Held as HMAC state already keyed with it (its pads hashed), so an entry costs only
/// its own bytes.
#[derive(Clone)]
pub struct EntryKey {
    keyed: HmacSha256,
}

impl EntryKey {
    /// The entry key of the edge whose secret is `edge_secret`: HMAC-SHA256(`edge_secret`,
    /// [`ENTRY_KEY_LABEL`]). The secret itself never keys an entry's MAC, so an entry reveals
    /// nothing usable against the origin's endpoints.
    pub fn derive(edge_secret: &str) -> EntryKey {
        let key = hmac_keyed(edge_secret.as_bytes()).chain_update(ENTRY_KEY_LABEL).finalize().into_bytes();
        EntryKey { keyed: hmac_keyed(&key) }
    }
}

impl fmt::Debug for EntryKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("EntryKey(..)")
    }
}

fn hmac_keyed(key: &[u8]) -> HmacSha256 {
    // HMAC takes a key of any length (a long one is hashed first), so this never fails.
    HmacSha256::new_from_slice(key).expect("HMAC takes a key of any length")
}

/// Why an entry read from the Cache API was not used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EntryRefused {
    /// The bytes do not start with an entry header: a bare segment (as older edges stored
    /// them), or anything else.
    NoEntryHeader,
    /// An entry format this code does not read.
    UnknownFormat(u16),
    /// The header is shorter than format 1's, or its length or reserved field is not format 1's.
    BadHeader,
    /// The content is not as long as the header says: truncated, or something appended.
    LengthMismatch {
        /// Content length the header declares.
        declared: usize,
        /// Content length found.
        found: usize,
    },
    /// The header declares more content than any segment of the filter has: refused before
    /// it is read into the isolate's memory.
    TooLarge {
        /// Content length the header declares.
        declared: usize,
        /// Most the filter's segments take.
        max: usize,
    },
    /// The MAC does not verify: written without this edge's key (or with another secret's),
    /// its content changed, or moved from another cache key.
    BadMac,
}

impl fmt::Display for EntryRefused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoEntryHeader => f.write_str("no entry header (not written by this edge's format)"),
            Self::UnknownFormat(v) => write!(f, "entry format {v}, this edge reads {ENTRY_FORMAT_VERSION}"),
            Self::BadHeader => f.write_str("malformed entry header"),
            Self::LengthMismatch { declared, found } => {
                write!(f, "content is {found} bytes, its header says {declared}")
            }
            Self::TooLarge { declared, max } => {
                write!(f, "content of {declared} bytes, over the {max} a segment takes")
            }
            Self::BadMac => f.write_str("MAC does not verify under this edge's key"),
        }
    }
}

/// An entry's header, read and checked, its MAC not yet verified: how long its content is.
#[derive(Clone, Copy, Debug)]
pub struct EntryHeader {
    fields: [u8; FIELDS],
    mac: [u8; 32],
    content_len: usize,
}

impl EntryHeader {
    /// Reads the header of an entry `entry_len` bytes long from `head`, its first
    /// [`ENTRY_HEADER_BYTES`] (or all of it, if shorter). The content must be the rest of the
    /// entry exactly, and at most `max_content` bytes, so an entry is judged before its content
    /// is copied anywhere.
    pub fn read(head: &[u8], entry_len: usize, max_content: usize) -> Result<EntryHeader, EntryRefused> {
        if head.get(..4) != Some(ENTRY_MAGIC.as_slice()) {
            return Err(EntryRefused::NoEntryHeader);
        }
        let [_, _, _, _, v0, v1, ..] = *head else { return Err(EntryRefused::BadHeader) };
        let version = u16::from_le_bytes([v0, v1]);
        if version != ENTRY_FORMAT_VERSION {
            return Err(EntryRefused::UnknownFormat(version));
        }
        let Some(head) = head.get(..ENTRY_HEADER_BYTES) else { return Err(EntryRefused::BadHeader) };
        let le_u32 = |at: usize| u32::from_le_bytes([head[at], head[at + 1], head[at + 2], head[at + 3]]);
        if usize::from(u16::from_le_bytes([head[6], head[7]])) != ENTRY_HEADER_BYTES || le_u32(12) != 0 {
            return Err(EntryRefused::BadHeader);
        }
        let declared = le_u32(8) as usize;
        if declared > max_content {
            return Err(EntryRefused::TooLarge { declared, max: max_content });
        }
        let found = entry_len.saturating_sub(ENTRY_HEADER_BYTES);
        if found != declared {
            return Err(EntryRefused::LengthMismatch { declared, found });
        }
        let mut header = EntryHeader { fields: [0; FIELDS], mac: [0; 32], content_len: declared };
        header.fields.copy_from_slice(&head[..FIELDS]);
        header.mac.copy_from_slice(&head[FIELDS..]);
        Ok(header)
    }

    /// Bytes of content that follow the header.
    pub fn content_len(&self) -> usize {
        self.content_len
    }

    /// Whether the MAC is `key`'s over this header, `cache_key` (the URL the entry was read
    /// under) and `content`; compared in constant time.
    pub fn verify(&self, key: &EntryKey, cache_key: &str, content: &[u8]) -> Result<(), EntryRefused> {
        if content.len() != self.content_len {
            return Err(EntryRefused::LengthMismatch { declared: self.content_len, found: content.len() });
        }
        mac(key, &self.fields, cache_key, content).verify_slice(&self.mac).map_err(|_| EntryRefused::BadMac)
    }
}

/// The header of an entry holding `content` under `cache_key`: the entry is this followed by
/// `content`, stored at exactly `cache_key`. Content over 4 GiB is not a segment; it is
/// refused when read back (its length field cannot hold it).
pub fn seal(key: &EntryKey, cache_key: &str, content: &[u8]) -> [u8; ENTRY_HEADER_BYTES] {
    let mut header = [0u8; ENTRY_HEADER_BYTES];
    header[0..4].copy_from_slice(&ENTRY_MAGIC);
    header[4..6].copy_from_slice(&ENTRY_FORMAT_VERSION.to_le_bytes());
    header[6..8].copy_from_slice(&(ENTRY_HEADER_BYTES as u16).to_le_bytes());
    header[8..12].copy_from_slice(&u32::try_from(content.len()).unwrap_or(u32::MAX).to_le_bytes());
    let mut fields = [0u8; FIELDS];
    fields.copy_from_slice(&header[..FIELDS]);
    let tag = mac(key, &fields, cache_key, content).finalize().into_bytes();
    header[FIELDS..].copy_from_slice(&tag);
    header
}

/// The content of a whole `entry` read under `cache_key`, if it verifies
/// ([`EntryHeader::read`], then [`EntryHeader::verify`]).
pub fn open<'a>(
    key: &EntryKey,
    cache_key: &str,
    entry: &'a [u8],
    max_content: usize,
) -> Result<&'a [u8], EntryRefused> {
    let head = &entry[..entry.len().min(ENTRY_HEADER_BYTES)];
    let header = EntryHeader::read(head, entry.len(), max_content)?;
    let content = &entry[ENTRY_HEADER_BYTES..];
    header.verify(key, cache_key, content)?;
    Ok(content)
}

/// The MAC's input, in order: the header's fields (magic, version and the content's length, so
/// one format's bytes are never read as another's), the cache key with its length before it,
/// then the content: no two (cache key, content) pairs give the same input.
fn mac(key: &EntryKey, fields: &[u8; FIELDS], cache_key: &str, content: &[u8]) -> HmacSha256 {
    let mut mac = key.keyed.clone();
    mac.update(fields);
    mac.update(&u32::try_from(cache_key.len()).unwrap_or(u32::MAX).to_le_bytes());
    mac.update(cache_key.as_bytes());
    mac.update(content);
    mac
}

#[cfg(test)]
mod tests {
    use super::*;

    const URL: &str = "https://bloomgate-edge.cache/v1/filters/f/segments/9/2";

    fn entry(key: &EntryKey, url: &str, content: &[u8]) -> Vec<u8> {
        [seal(key, url, content).as_slice(), content].concat()
    }

    #[test]
    fn the_key_is_the_documented_derivation_and_differs_by_secret() {
        let derived = hmac_keyed(b"s3cret").chain_update(ENTRY_KEY_LABEL).finalize().into_bytes();
        let by_hand = EntryKey { keyed: hmac_keyed(&derived) };
        let content = b"some segment bytes";
        assert_eq!(seal(&EntryKey::derive("s3cret"), URL, content), seal(&by_hand, URL, content));
        assert_ne!(seal(&EntryKey::derive("s3cret"), URL, content), seal(&EntryKey::derive("s3creT"), URL, content));
        assert_eq!(format!("{:?}", EntryKey::derive("s3cret")), "EntryKey(..)", "Debug shows nothing of the key");
    }

    #[test]
    fn a_sealed_entry_opens_to_its_content_and_its_header_reads_as_documented() {
        let key = EntryKey::derive("s3cret");
        let sealed = entry(&key, URL, b"0123456789");
        assert_eq!(&sealed[..8], b"BGCE\x01\x00\x30\x00", "magic, format 1, header length 48");
        assert_eq!(&sealed[8..16], &[10, 0, 0, 0, 0, 0, 0, 0], "content length, reserved");
        assert_eq!(open(&key, URL, &sealed, 10), Ok(b"0123456789".as_slice()));
        assert_eq!(open(&key, URL, &sealed, 9), Err(EntryRefused::TooLarge { declared: 10, max: 9 }));
        let empty = entry(&key, URL, b"");
        assert_eq!(open(&key, URL, &empty, 10), Ok(b"".as_slice()));
    }

    #[test]
    fn a_later_format_is_refused_even_when_its_mac_verifies() {
        let key = EntryKey::derive("s3cret");
        let mut later = entry(&key, URL, b"content");
        later[4..6].copy_from_slice(&2u16.to_le_bytes());
        let mut fields = [0u8; FIELDS];
        fields.copy_from_slice(&later[..FIELDS]);
        let tag = mac(&key, &fields, URL, b"content").finalize().into_bytes();
        later[FIELDS..ENTRY_HEADER_BYTES].copy_from_slice(&tag);
        assert_eq!(open(&key, URL, &later, 100), Err(EntryRefused::UnknownFormat(2)));
    }

    #[test]
    fn every_header_field_is_checked() {
        let key = EntryKey::derive("s3cret");
        let good = entry(&key, URL, b"content");
        let with = |at: usize, byte: u8| {
            let mut bytes = good.clone();
            bytes[at] = byte;
            open(&key, URL, &bytes, 100).map(<[u8]>::len)
        };
        assert_eq!(with(0, b'X'), Err(EntryRefused::NoEntryHeader));
        assert_eq!(with(6, 64), Err(EntryRefused::BadHeader), "header length");
        assert_eq!(with(13, 1), Err(EntryRefused::BadHeader), "reserved");
        assert_eq!(with(8, 6), Err(EntryRefused::LengthMismatch { declared: 6, found: 7 }));
        assert_eq!(with(20, good[20] ^ 1), Err(EntryRefused::BadMac), "the MAC itself");
        assert_eq!(with(ENTRY_HEADER_BYTES, b'C'), Err(EntryRefused::BadMac), "the content");
        assert_eq!(open(&key, URL, b"BGCE\x01", 100), Err(EntryRefused::BadHeader), "cut inside the header");
        assert_eq!(open(&key, URL, b"BGC", 100), Err(EntryRefused::NoEntryHeader));
    }
}
