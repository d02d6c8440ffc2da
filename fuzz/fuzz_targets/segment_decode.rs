//! Fuzzes the segment wire format: arbitrary bytes must never panic `decode_segment`, and a
//! segment it accepts must answer lookups and re-encode to exactly the bytes it came from.
//!
//! Random bytes almost never carry a valid XXH3 checksum, so each input is also *repaired* into
//! a valid segment (header fields taken from the input, checksum recomputed), which must decode
//! and round-trip, and then has one bit flipped (position chosen by the input), which must be
//! refused.

#![no_main]

use bloomgate_filter::segment::SEGMENT_HEADER_BYTES;
use bloomgate_filter::{decode_segment, encode_segment, encode_segment_at, JournalPosition, Params, SegmentView};
use libfuzzer_sys::fuzz_target;

/// Checks everything an accepted segment promises, against the bytes it was decoded from.
fn check_accepted(view: &SegmentView<'_>, bytes: &[u8]) {
    let h = view.header();
    let params = &h.params;
    assert!(h.index < params.segment_count);
    assert_eq!(view.payload().len() as u64, params.segment_bytes());
    for i in 0u32..8 {
        let key = i.to_le_bytes();
        // Never panics; a key that lives in another segment is an error, never a "no".
        match view.may_contain(&key) {
            Ok(_) => {
                let at = params.locate(&bloomgate_filter::hash_key(&key, params.seed));
                assert_eq!(at.segment, h.index);
            }
            Err(wrong) => {
                assert_eq!(wrong.actual, h.index);
                assert_ne!(wrong.expected, h.index);
                assert!(wrong.expected < params.segment_count);
            }
        }
    }
    let again = match h.journal {
        None => encode_segment(params, h.generation, h.index, h.version, view.payload()),
        Some(at) => encode_segment_at(params, h.generation, h.index, h.version, at, view.payload()),
    }
    .expect("an accepted segment re-encodes");
    assert_eq!(again, bytes, "re-encoding changed the bytes");
}

fn le_u64(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    for (i, slot) in a.iter_mut().enumerate() {
        *slot = b.get(at + i).copied().unwrap_or(0);
    }
    u64::from_le_bytes(a)
}

/// KNOWN BUG, reported, not yet fixed in `shared/src/params.rs`: `Params::new` computes the
/// `BadSegmentSize` byte count as `64 * (1 << log2.min(63))`, which overflows for
/// log2 >= 58: a panic with overflow checks on (debug builds, and this fuzzer), a wrong error
/// value (0 bytes) without. A header whose log2 byte (offset 17) is that large is skipped, so the
/// fuzzer can explore everything else; `artifacts/` keeps the crashing input. Delete this guard
/// once the fix lands.
/// Was a guard for a `Params::new` overflow at log2 ≥ 58, found here and fixed in the core;
/// kept as a no-op so the targets' shape stays the same.
fn hits_known_log2_overflow(_bytes: &[u8]) -> bool {
    false
}

fuzz_target!(|data: &[u8]| {
    if !hits_known_log2_overflow(data) {
        if let Ok(view) = decode_segment(data) {
            check_accepted(&view, data);
        }
    }

    // The repaired segment: small (at most 16 blocks per segment, 64 segments) so every input
    // stays cheap.
    let k = data.first().map_or(6, |b| b % 16 + 1);
    let log2 = data.get(1).map_or(0, |b| b % 5);
    let count = data.get(2).map_or(1, |b| u32::from(b % 64) + 1);
    let index = data.get(3).map_or(0, |b| u32::from(*b) % count);
    let params = Params::new(le_u64(data, 4), k, log2, count).expect("valid by construction");
    let payload: Vec<u8> = (0..params.segment_bytes() as usize)
        .map(|i| data.get(SEGMENT_HEADER_BYTES + i).copied().unwrap_or(0))
        .collect();
    // Either format version, chosen by the input: version 2 also names a journal position.
    let bytes = if data.get(36).is_some_and(|b| b & 1 == 1) {
        let at = JournalPosition { added: le_u64(data, 37), id_ms: le_u64(data, 45), id_seq: le_u64(data, 53) };
        encode_segment_at(&params, le_u64(data, 12), index, le_u64(data, 20), at, &payload)
    } else {
        encode_segment(&params, le_u64(data, 12), index, le_u64(data, 20), &payload)
    }
    .expect("valid by construction");
    let view = decode_segment(&bytes).expect("a freshly encoded segment decodes");
    assert_eq!(view.header().params, params);
    check_accepted(&view, &bytes);

    let mut flipped = bytes.clone();
    let bit = le_u64(data, 28) as usize % (flipped.len() * 8);
    flipped[bit / 8] ^= 1 << (bit % 8);
    if !hits_known_log2_overflow(&flipped) {
        assert!(decode_segment(&flipped).is_err(), "a one-bit flip at bit {bit} was accepted");
    }
    // Truncated or extended by one byte: always a length error, never a panic.
    assert!(decode_segment(&bytes[..bytes.len() - 1]).is_err());
    let mut longer = bytes;
    longer.push(0);
    assert!(decode_segment(&longer).is_err());
});
