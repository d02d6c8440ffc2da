//! Entries planted in the Cache API beside the edge's own, read back as the worker reads them
//! (entry opened, segment decoded, checked against the manifest): each forgery is refused and
//! read as a miss, the genuine entry is used. The forgeries would do harm if they were used: a
//! segment claiming a journal position far ahead of the origin's, with none of its bits set,
//! answers "not seen" for a key the origin acknowledged.
//!
//! # Running
//! `cargo test -p bloomgate-edge --test forged_cache_entries` (native, no services).

use bloomgate_edge::cache_copy::{max_entry_content, segment_cache_url};
use bloomgate_edge::cache_entry::{open, seal, EntryKey, EntryRefused, ENTRY_HEADER_BYTES, ENTRY_KEY_LABEL};
use bloomgate_edge::copy::SegmentCopy;
use bloomgate_edge::decide::{decide, segment_of, segment_usable, Decision};
use bloomgate_filter::{
    encode_segment, encode_segment_at, BloomFilter, JournalPosition, KeyFormat, Manifest, Params, Segment,
    SizingOptions,
};
use hmac::{Hmac, Mac};
use sha2::Sha256;

const SECRET: &str = "the-edge-secret";
/// A key the origin acknowledged: every genuine copy of its segment says "maybe".
const WRITTEN: &[u8] = b"written-key";

fn at(added: u64) -> JournalPosition {
    JournalPosition { added, id_ms: 1_700_000_000_000 + added, id_seq: 0 }
}

/// Filter `f`'s generation 9 with `WRITTEN` in it, its manifest naming journal head 100, and
/// the segment `WRITTEN` is in.
struct Zone {
    manifest: Manifest,
    filter: BloomFilter,
    index: u32,
}

fn zone() -> Zone {
    let params = Params::for_capacity_with(5_000, 0.01, SizingOptions { seed: 7, segment_bytes: 1024 }).unwrap();
    let mut filter = BloomFilter::new(params);
    filter.insert(WRITTEN);
    let manifest = Manifest {
        format: bloomgate_filter::MANIFEST_FORMAT,
        filter: "f".into(),
        key_format: KeyFormat::Bytes,
        generation: 9,
        params,
        segment_versions: Vec::new(),
        journal: Some(at(100)),
    };
    let index = segment_of(&manifest, WRITTEN);
    assert!(params.segment_count > 2, "room to move an entry to another segment");
    Zone { manifest, filter, index }
}

impl Zone {
    /// The segment as the origin serves it: current to the head, `WRITTEN`'s bits set.
    fn genuine_segment(&self) -> Vec<u8> {
        let payload = self.filter.segment_payload(self.index);
        encode_segment_at(&self.manifest.params, 9, self.index, 1, at(100), &payload).unwrap()
    }

    /// A segment a forger writes: no bit set, current (it claims) to far past the head.
    fn far_ahead_empty_segment(&self) -> Vec<u8> {
        let empty = vec![0; self.manifest.params.segment_bytes() as usize];
        encode_segment_at(&self.manifest.params, 9, self.index, 1, at(1_000_000), &empty).unwrap()
    }

    fn url(&self) -> String {
        segment_cache_url(&self.manifest, self.index, 1)
    }

    /// What the edge makes of `bytes` read under `url`: a copy it would answer from, or why
    /// the entry was refused (then: a miss).
    fn read_back(&self, url: &str, bytes: &[u8]) -> Result<SegmentCopy, EntryRefused> {
        let key = EntryKey::derive(SECRET);
        let content = open(&key, url, bytes, max_entry_content(&self.manifest))?;
        let segment = Segment::decode(content.to_vec()).expect("an entry the edge sealed holds a segment");
        Ok(SegmentCopy::new(segment))
    }

    /// What a copy says about `WRITTEN` under the manifest.
    fn answers(&self, copy: &SegmentCopy) -> Decision {
        decide(&self.manifest, Some(copy), WRITTEN)
    }
}

/// An entry as the edge writes one.
fn sealed(key: &EntryKey, url: &str, content: &[u8]) -> Vec<u8> {
    [seal(key, url, content).as_slice(), content].concat()
}

/// An entry built from the format's description alone, its MAC keyed with `mac_key`.
fn by_the_book(mac_key: &[u8], url: &str, content: &[u8]) -> Vec<u8> {
    let mut fields = Vec::from(*b"BGCE");
    fields.extend_from_slice(&1u16.to_le_bytes());
    fields.extend_from_slice(&48u16.to_le_bytes());
    fields.extend_from_slice(&(content.len() as u32).to_le_bytes());
    fields.extend_from_slice(&[0; 4]);
    let mut mac = Hmac::<Sha256>::new_from_slice(mac_key).unwrap();
    mac.update(&fields);
    mac.update(&(url.len() as u32).to_le_bytes());
    mac.update(url.as_bytes());
    mac.update(content);
    [fields.as_slice(), &mac.finalize().into_bytes(), content].concat()
}

/// HMAC-SHA256(`secret`, the label): the key the format names.
fn entry_key_bytes(secret: &str) -> Vec<u8> {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(ENTRY_KEY_LABEL);
    mac.finalize().into_bytes().to_vec()
}

#[test]
fn the_genuine_entry_is_used_and_answers_maybe_for_the_written_key() {
    let zone = zone();
    let entry = sealed(&EntryKey::derive(SECRET), &zone.url(), &zone.genuine_segment());
    let copy = zone.read_back(&zone.url(), &entry).expect("the edge's own entry");
    assert!(segment_usable(&zone.manifest, &copy));
    assert_eq!(copy.current_to(), Some(at(100)));
    assert_eq!(zone.answers(&copy), Decision::ForwardMaybe);
}

#[test]
fn an_entry_written_to_the_documented_format_with_the_derived_key_is_used() {
    let zone = zone();
    let entry = by_the_book(&entry_key_bytes(SECRET), &zone.url(), &zone.genuine_segment());
    assert_eq!(entry, sealed(&EntryKey::derive(SECRET), &zone.url(), &zone.genuine_segment()));
    assert!(zone.read_back(&zone.url(), &entry).is_ok());
}

#[test]
fn a_bare_segment_as_older_edges_stored_them_is_refused() {
    let zone = zone();
    let forged = zone.far_ahead_empty_segment();
    // Undamaged and usable under the manifest as far as the segment itself tells: it would
    // answer "not seen" for a key the origin acknowledged.
    let as_decoded = SegmentCopy::new(Segment::decode(forged.clone()).unwrap());
    assert_eq!(zone.answers(&as_decoded), Decision::NotSeen);
    assert_eq!(zone.read_back(&zone.url(), &forged).unwrap_err(), EntryRefused::NoEntryHeader);
    // So is a genuine segment stored bare: whatever it holds, it names no writer.
    assert_eq!(zone.read_back(&zone.url(), &zone.genuine_segment()).unwrap_err(), EntryRefused::NoEntryHeader);
}

#[test]
fn entries_macd_with_any_other_key_are_refused() {
    let zone = zone();
    let (url, forged) = (zone.url(), zone.far_ahead_empty_segment());
    let other_secret = sealed(&EntryKey::derive("another-edge-secret"), &url, &forged);
    assert_eq!(zone.read_back(&url, &other_secret).unwrap_err(), EntryRefused::BadMac);
    let raw_secret = by_the_book(SECRET.as_bytes(), &url, &forged);
    assert_eq!(zone.read_back(&url, &raw_secret).unwrap_err(), EntryRefused::BadMac, "the secret, not the key");
    let other_label = by_the_book(&entry_key_bytes(&format!("{SECRET}x")), &url, &forged);
    assert_eq!(zone.read_back(&url, &other_label).unwrap_err(), EntryRefused::BadMac);
    let mut no_mac = sealed(&EntryKey::derive(SECRET), &url, &forged);
    no_mac[16..ENTRY_HEADER_BYTES].fill(0);
    assert_eq!(zone.read_back(&url, &no_mac).unwrap_err(), EntryRefused::BadMac);
}

#[test]
fn a_genuine_header_on_a_tampered_position_is_refused() {
    let zone = zone();
    let url = zone.url();
    let genuine = sealed(&EntryKey::derive(SECRET), &url, &zone.genuine_segment());
    // The position rewritten with the segment's checksum recomputed: a segment that decodes.
    let tampered = [&genuine[..ENTRY_HEADER_BYTES], &zone.far_ahead_empty_segment()].concat();
    assert_eq!(tampered.len(), genuine.len());
    assert_eq!(zone.read_back(&url, &tampered).unwrap_err(), EntryRefused::BadMac);
    // One payload bit, the segment's checksum left as it was: refused before the segment's
    // own check is reached.
    let mut flipped = genuine.clone();
    *flipped.last_mut().unwrap() ^= 1;
    assert_eq!(zone.read_back(&url, &flipped).unwrap_err(), EntryRefused::BadMac);
}

#[test]
fn a_genuine_entry_moved_under_another_cache_key_is_refused() {
    let zone = zone();
    let entry = sealed(&EntryKey::derive(SECRET), &zone.url(), &zone.genuine_segment());
    let other_index = (zone.index + 1) % zone.manifest.params.segment_count;
    let next_generation = Manifest { generation: 10, ..zone.manifest.clone() };
    let other_filter = Manifest { filter: "g".into(), ..zone.manifest.clone() };
    let journal_less = Manifest {
        journal: None,
        segment_versions: vec![1; zone.manifest.params.segment_count as usize],
        ..zone.manifest.clone()
    };
    let moved_to = [
        segment_cache_url(&zone.manifest, other_index, 1),
        segment_cache_url(&next_generation, zone.index, 1),
        segment_cache_url(&other_filter, zone.index, 1),
        segment_cache_url(&journal_less, zone.index, 1),
    ];
    for url in moved_to {
        assert_ne!(url, zone.url());
        assert_eq!(zone.read_back(&url, &entry).unwrap_err(), EntryRefused::BadMac, "{url}");
    }
    assert!(zone.read_back(&zone.url(), &entry).is_ok(), "where it was put");
}

#[test]
fn a_version_moved_under_another_versions_key_is_refused() {
    let zone = zone();
    let manifest = Manifest { journal: None, segment_versions: vec![3; 8], ..zone.manifest.clone() };
    let payload = zone.filter.segment_payload(zone.index);
    let v2 = encode_segment(&manifest.params, 9, zone.index, 2, &payload).unwrap();
    let entry = sealed(&EntryKey::derive(SECRET), &segment_cache_url(&manifest, zone.index, 2), &v2);
    let as_v3 = segment_cache_url(&manifest, zone.index, 3);
    assert_eq!(zone.read_back(&as_v3, &entry).unwrap_err(), EntryRefused::BadMac);
}

#[test]
fn a_truncated_entry_is_refused() {
    let zone = zone();
    let url = zone.url();
    let key = EntryKey::derive(SECRET);
    let genuine = zone.genuine_segment();
    let entry = sealed(&key, &url, &genuine);
    let content_len = genuine.len();
    for cut in [entry.len() - 1, ENTRY_HEADER_BYTES + 96, ENTRY_HEADER_BYTES] {
        let refused = zone.read_back(&url, &entry[..cut]).unwrap_err();
        assert_eq!(refused, EntryRefused::LengthMismatch { declared: content_len, found: cut - ENTRY_HEADER_BYTES });
    }
    assert_eq!(zone.read_back(&url, &entry[..20]).unwrap_err(), EntryRefused::BadHeader);
    // Cut, with the header's length made to agree: the MAC covers the length.
    let mut agreeing = entry[..entry.len() - 64].to_vec();
    agreeing[8..12].copy_from_slice(&((content_len - 64) as u32).to_le_bytes());
    assert_eq!(zone.read_back(&url, &agreeing).unwrap_err(), EntryRefused::BadMac);
}

#[test]
fn a_later_format_and_an_oversized_entry_are_refused_before_their_mac() {
    let zone = zone();
    let url = zone.url();
    let mut later = sealed(&EntryKey::derive(SECRET), &url, &zone.genuine_segment());
    later[4] = 2;
    assert_eq!(zone.read_back(&url, &later).unwrap_err(), EntryRefused::UnknownFormat(2));
    let max = max_entry_content(&zone.manifest);
    let huge = vec![0; max + 1];
    let oversized = sealed(&EntryKey::derive(SECRET), &url, &huge);
    assert_eq!(zone.read_back(&url, &oversized).unwrap_err(), EntryRefused::TooLarge { declared: max + 1, max });
}
