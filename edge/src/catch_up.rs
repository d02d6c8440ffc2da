//! Bringing the copies an isolate holds up to a manifest's journal head, pure: which copies are
//! behind, where journal requests start, how large a chunk is worth reading, when to ask again.
//!
//! Every chunk the isolate reads goes into the filter generation's journal tail
//! ([`crate::tail`]), and copies are brought forward from there. Forward requests start at the
//! tail's head (the entries since the last one read: one request per filter per refresh, a few
//! bytes when nothing was written). A copy older than the tail's base (one from the Cache API,
//! written by an isolate long ago) needs the entries before it: one request back from the
//! oldest such copy ([`oldest_uncovered`]), after which the tail reaches it and every younger
//! copy. The work per catch-up is bounded: at most [`MAX_JOURNAL_REQUESTS`] chunks (the origin
//! sends at most 16,384 entries each), each at most [`chunk_byte_limit`] bytes. Copies still
//! behind after that are simply not used for "no": they are fetched whole when a lookup needs
//! them.

use crate::copy::SegmentCopy;
use bloomgate_filter::{JournalPosition, Manifest};

/// Journal requests one catch-up makes at most.
pub const MAX_JOURNAL_REQUESTS: u32 = 4;
/// A chunk is worth reading up to the bytes of the copies it brings forward (past that,
/// fetching them whole costs less), but never less than this: a few seconds of single-key
/// writes always fit.
pub const MIN_CHUNK_BYTES: usize = 256 * 1024;
/// Nor more than this, whatever is held: the body is read whole into an isolate of 128 MB.
pub const MAX_CHUNK_BYTES: usize = 8 * 1024 * 1024;

/// Whether `held` is a copy of the manifest's generation that the journal can bring up to the
/// manifest's head: it names a position, and that position is behind the head.
pub fn behind(manifest: &Manifest, held: &SegmentCopy) -> bool {
    let header = held.segment().header();
    let Some(head) = manifest.journal else {
        return false;
    };
    header.generation == manifest.generation
        && header.params == manifest.params
        && held.current_to().is_some_and(|at| at.added < head.added)
}

/// Where a request back starts: the lowest position among `copies` that is older than the
/// tail's `base` (the tail cannot bring those forward). None when the tail reaches them all.
pub fn oldest_uncovered<'a>(base: u64, copies: impl IntoIterator<Item = &'a SegmentCopy>) -> Option<JournalPosition> {
    copies.into_iter().filter_map(SegmentCopy::current_to).filter(|at| at.added < base).min_by_key(|at| at.added)
}

/// Largest chunk body to read when the copies behind hold `behind_bytes`.
pub fn chunk_byte_limit(behind_bytes: usize) -> usize {
    behind_bytes.clamp(MIN_CHUNK_BYTES, MAX_CHUNK_BYTES)
}

/// Whether to ask again after a chunk asked from `from` ended at `to`, to reach a head of
/// `head` entries: only if the chunk stopped short of it and made progress (a chunk that did
/// not would only be asked for again).
pub fn ask_again(from: JournalPosition, to: JournalPosition, head: u64) -> bool {
    to.added < head && to.added > from.added
}

/// After a 410 for the entries after `from`: whether the copy at `at` went with them. Copies
/// further on may still be covered; the next request starts from the lowest of those.
pub fn gone(from: JournalPosition, at: Option<JournalPosition>) -> bool {
    at.is_none_or(|at| at.added <= from.added)
}

/// The journal request: entries of `generation` after `after`.
pub fn journal_url(origin_url: &str, filter: &str, generation: u64, after: JournalPosition) -> String {
    format!("{origin_url}{}", bloomgate_client::paths::journal(filter, generation, &after))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::at;
    use bloomgate_filter::{encode_segment, encode_segment_at, Params, Segment};

    fn params() -> Params {
        crate::testing::params(3)
    }

    fn manifest(head: Option<u64>) -> Manifest {
        crate::testing::manifest(params(), 4, head.map(at))
    }

    fn held(generation: u64, position: Option<u64>) -> SegmentCopy {
        let p = params();
        let payload = vec![0u8; p.segment_bytes() as usize];
        let bytes = match position {
            Some(added) => encode_segment_at(&p, generation, 0, 4, at(added), &payload),
            None => encode_segment(&p, generation, 0, 4, &payload),
        };
        SegmentCopy::new(Segment::decode(bytes.unwrap()).unwrap())
    }

    #[test]
    fn only_copies_of_this_generation_with_a_position_short_of_the_head_are_behind() {
        let m = manifest(Some(100));
        assert!(behind(&m, &held(9, Some(99))));
        assert!(!behind(&m, &held(9, Some(100))), "current to the head");
        assert!(!behind(&m, &held(9, Some(150))), "past it (fetched after the manifest)");
        assert!(!behind(&m, &held(8, Some(10))), "another generation is never caught up");
        assert!(!behind(&m, &held(9, None)), "format 1: no position to start from");
        assert!(!behind(&manifest(None), &held(9, Some(10))), "no journal named: versions decide");
    }

    #[test]
    fn one_request_back_from_the_oldest_copy_the_tail_does_not_reach() {
        let copies = [held(9, Some(70)), held(9, Some(40)), held(9, None), held(9, Some(90))];
        assert_eq!(oldest_uncovered(80, &copies), Some(at(40)));
        assert_eq!(oldest_uncovered(40, &copies), None, "a copy at the base is covered");
        assert_eq!(oldest_uncovered(80, &copies[2..3]), None, "no position: nothing to start from");
        assert_eq!(
            journal_url("http://o:1", "f", 9, at(40)),
            "http://o:1/v1/filters/f/journal/9?after=40&after_id=1700000000040-1"
        );
    }

    #[test]
    fn ask_again_only_when_short_of_the_head_and_moving() {
        assert!(ask_again(at(10), at(16_394), 20_000), "a full chunk: the rest follows");
        assert!(!ask_again(at(10), at(20_000), 20_000));
        assert!(!ask_again(at(10), at(20_500), 20_000), "the origin's head moved on meanwhile");
        assert!(!ask_again(at(10), at(10), 20_000), "no progress: asking again would repeat it");
    }

    #[test]
    fn chunks_are_read_up_to_what_they_replace_within_bounds() {
        assert_eq!(chunk_byte_limit(0), MIN_CHUNK_BYTES);
        assert_eq!(chunk_byte_limit(3 * 1024 * 1024), 3 * 1024 * 1024);
        assert_eq!(chunk_byte_limit(usize::MAX), MAX_CHUNK_BYTES);
    }

    #[test]
    fn a_copy_a_damaged_chunk_could_not_bring_forward_never_answers_no() {
        use crate::decide::{decide, segment_usable, Decision};
        use crate::tail::{Forward, JournalTail};
        use bloomgate_filter::{decode_journal, encode_journal, hash_key};
        let m = manifest(Some(100));
        let copy = held(9, Some(60));
        let keys: Vec<[u8; 4]> = (0u32..40).map(|i| i.to_le_bytes()).collect();
        assert!(
            keys.iter().any(|k| crate::decide::segment_of(&m, k) == 0),
            "some keys must fall in the copy's segment"
        );
        let entries: Vec<_> = keys.iter().map(|k| vec![hash_key(k, m.params.seed)]).collect();
        let chunk = encode_journal(9, m.params.seed, 60, at(100), &entries);
        // Cut anywhere or flipped anywhere, the chunk does not decode: nothing is applied.
        for len in 0..chunk.len() {
            assert!(decode_journal(&chunk[..len]).is_err(), "cut to {len} bytes");
        }
        for i in 0..chunk.len() {
            let mut bad = chunk.clone();
            bad[i] ^= 0x01;
            assert!(decode_journal(&bad).is_err(), "bit flipped in byte {i}");
        }
        // The copy stays where it was: under the manifest it answers nothing, whatever the key.
        assert!(behind(&m, &copy) && !segment_usable(&m, &copy));
        for key in &keys {
            assert_ne!(decide(&m, Some(&copy), key), Decision::NotSeen);
        }
        // The whole chunk brings it forward, and the keys it carries are then never "no" (the
        // ones in this segment are "maybe"; the others are another segment's to answer).
        let mut tail = JournalTail::at(9, m.params, at(60));
        tail.add(&decode_journal(&chunk).unwrap()).unwrap();
        let Forward::Moved(current) = tail.bring_forward(&copy, Vec::with_capacity) else { panic!("not applied") };
        assert!(segment_usable(&m, &current));
        for key in &keys {
            assert_ne!(decide(&m, Some(&current), key), Decision::NotSeen);
        }
    }

    #[test]
    fn a_410_takes_the_copies_at_or_before_its_position() {
        assert!(gone(at(40), Some(at(40))));
        assert!(gone(at(40), Some(at(12))));
        assert!(!gone(at(40), Some(at(41))));
        assert!(gone(at(40), None));
    }
}
