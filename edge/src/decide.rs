//! The per-key decision, pure, shared by single and batch lookups: which segment a key is in,
//! whether a copy of it may answer under a manifest, what its bits say, and whether that "no"
//! still stands when answering; how long a fetch for a manifest may take.
//!
//! Freshness: a manifest is used for at most `FRESHNESS_SECS` after the edge *asked* for it
//! ([`crate::manifest::is_fresh`]). The origin reads what it lists after the request arrives,
//! so it covers every key acknowledged before the ask; a copy answers "no" only if it covers
//! at least as much
//! ([`segment_usable`]). With an insert journal (the manifest names its head) that is a copy
//! current to the head or past it: the head is read after the ask, and every acknowledged add
//! was appended before it was acknowledged. Without one, a copy at least at the listed version
//! (bits within a generation are only ever set, so newer is a superset). Hence a key
//! acknowledged at time t is answered "seen" by t + FRESHNESS_SECS at the latest.
//!
//! That holds at the moment of answering, not of deciding: loading a segment can take longer
//! than what is left of the bound, so a "no" is checked against the clock again after every
//! wait ([`answer_now`]), and fetches for a manifest are given no more time than it can be used
//! for ([`fetch_budget_ms`]). A slow origin thus turns into a forward or a 503, never a stale "no".

use crate::copy::SegmentCopy;
use crate::manifest::is_fresh;
use bloomgate_filter::{hash_key, Manifest};

/// What the edge does with a lookup.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// The segment rules the key out: answer 404 here.
    NotSeen,
    /// Ask the origin: the segment said "maybe".
    ForwardMaybe,
    /// Ask the origin: no usable segment.
    ForwardNoSegment,
    /// Ask the origin: the segment said "no", but the manifest it was read under passed its
    /// freshness bound meanwhile.
    ForwardStale,
}

/// Longest the edge waits for any one subrequest to the origin (manifest, segment, forwarded
/// lookup), whatever is left of the freshness bound: a hung origin costs a client this much at
/// most before a 503 (or a forward), never an open-ended wait.
pub const ORIGIN_TIMEOUT_CAP_MS: u32 = 10_000;

/// What the edge may answer at `now_ms` for a decision made from a manifest asked for at
/// `asked_at_ms`: a "no" stands only while that manifest is still fresh. Call it after the
/// last wait before answering.
pub fn answer_now(decision: Decision, asked_at_ms: f64, now_ms: f64, freshness_secs: u32) -> Decision {
    match decision {
        Decision::NotSeen if !is_fresh(asked_at_ms, now_ms, freshness_secs) => Decision::ForwardStale,
        other => other,
    }
}

/// How long a fetch made for a manifest asked for at `asked_at_ms` may take, in whole ms: what
/// is left of its freshness (a segment arriving later could not answer "no" under it), at most
/// [`ORIGIN_TIMEOUT_CAP_MS`]. None when nothing is left: do not fetch, forward. A manifest
/// fetch itself passes `asked_at_ms = now_ms` and gets the whole bound.
pub fn fetch_budget_ms(asked_at_ms: f64, now_ms: f64, freshness_secs: u32) -> Option<u32> {
    if !is_fresh(asked_at_ms, now_ms, freshness_secs) {
        return None;
    }
    let left = asked_at_ms + f64::from(freshness_secs) * 1000.0 - now_ms;
    // Floored: a fetch must end before the bound does. Under 1 ms there is nothing to wait for.
    let left = left.floor().min(f64::from(ORIGIN_TIMEOUT_CAP_MS));
    (left >= 1.0).then_some(left as u32)
}

/// Which segment a normalised key lives in under this manifest.
pub fn segment_of(manifest: &Manifest, key: &[u8]) -> u32 {
    manifest.params.locate(&hash_key(key, manifest.params.seed)).segment
}

/// What a lookup needs of a segment under this manifest, to share one fetch among the lookups
/// that need the same: a copy current to the journal head, or at least the listed version.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Wanted {
    /// Current to this many journal entries.
    JournalAt(u64),
    /// At least this version.
    Version(u64),
}

/// What segment `index` must be to answer under `manifest`; None for an index it does not list.
pub fn wanted(manifest: &Manifest, index: u32) -> Option<Wanted> {
    match manifest.journal {
        Some(head) => (index < manifest.params.segment_count).then_some(Wanted::JournalAt(head.added)),
        None => manifest.segment_version(index).map(Wanted::Version),
    }
}

/// Whether a segment we hold can answer "no" under `manifest`: same filter generation and
/// params, and current to the manifest's journal head, or (a manifest naming no journal) at
/// least at the version it lists. A copy naming no position never answers under a journal.
pub fn segment_usable(manifest: &Manifest, held: &SegmentCopy) -> bool {
    let header = held.segment().header();
    match manifest.journal {
        Some(head) => {
            header.params == manifest.params
                && header.generation == manifest.generation
                && header.index < manifest.params.segment_count
                && held.current_to().is_some_and(|at| at.added >= head.added)
        }
        None => manifest.accepts(header),
    }
}

/// What a segment says about a normalised key. A segment that is not usable, or is the
/// wrong one, never produces a "no".
pub fn decide(manifest: &Manifest, segment: Option<&SegmentCopy>, key: &[u8]) -> Decision {
    let Some(held) = segment.filter(|h| segment_usable(manifest, h)) else {
        return Decision::ForwardNoSegment;
    };
    match held.segment().view().may_contain(key) {
        Ok(false) => Decision::NotSeen,
        Ok(true) => Decision::ForwardMaybe,
        Err(_) => Decision::ForwardNoSegment,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bloomgate_filter::{encode_segment, encode_segment_at, BloomFilter, JournalPosition, Segment};

    fn held(bytes: Vec<u8>) -> SegmentCopy {
        SegmentCopy::new(Segment::decode(bytes).unwrap())
    }

    fn setup() -> (Manifest, BloomFilter) {
        let params = crate::testing::params(7);
        let mut filter = BloomFilter::new(params);
        for i in 0u32..5_000 {
            filter.insert(&i.to_le_bytes());
        }
        (crate::testing::manifest(params, 3, None), filter)
    }

    #[test]
    fn members_are_never_answered_not_seen_and_strangers_mostly_are() {
        let (manifest, filter) = setup();
        let encoded: Vec<Vec<u8>> = (0..manifest.params.segment_count)
            .map(|i| encode_segment(&manifest.params, 9, i, 3, &filter.segment_payload(i)).unwrap())
            .collect();
        let mut not_seen = 0;
        for i in 0u32..20_000 {
            let key = i.to_le_bytes();
            let seg = segment_of(&manifest, &key);
            let copy = held(encoded[seg as usize].clone());
            let d = decide(&manifest, Some(&copy), &key);
            if i < 5_000 {
                assert_ne!(d, Decision::NotSeen, "member {i}");
            } else if d == Decision::NotSeen {
                not_seen += 1;
            }
            // The wrong segment never answers.
            let other = held(encoded[((seg + 1) % manifest.params.segment_count) as usize].clone());
            assert_ne!(decide(&manifest, Some(&other), &key), Decision::NotSeen);
        }
        assert!(not_seen > 14_500, "{not_seen}");
    }

    #[test]
    fn older_versions_other_generations_and_no_segment_forward() {
        let (manifest, filter) = setup();
        let key = 10_000u32.to_le_bytes();
        let seg = segment_of(&manifest, &key);
        let payload = filter.segment_payload(seg);
        let old = encode_segment(&manifest.params, 9, seg, 2, &payload).unwrap();
        assert_eq!(decide(&manifest, Some(&held(old)), &key), Decision::ForwardNoSegment);
        let other_gen = encode_segment(&manifest.params, 8, seg, 3, &payload).unwrap();
        assert_eq!(decide(&manifest, Some(&held(other_gen)), &key), Decision::ForwardNoSegment);
        assert_eq!(decide(&manifest, None, &key), Decision::ForwardNoSegment);
    }

    #[test]
    fn under_a_journal_a_copy_answers_iff_current_to_the_head() {
        let (mut manifest, filter) = setup();
        let head = JournalPosition { added: 50, id_ms: 1_700_000_000_000, id_seq: 0 };
        manifest.journal = Some(head);
        let key = 10_000u32.to_le_bytes();
        let seg = segment_of(&manifest, &key);
        let payload = filter.segment_payload(seg);
        let at = |added: u64, version: u64| {
            held(
                encode_segment_at(&manifest.params, 9, seg, version, JournalPosition { added, ..head }, &payload)
                    .unwrap(),
            )
        };
        let no = decide(&manifest, Some(&at(50, 3)), &key);
        assert!(no == Decision::NotSeen || no == Decision::ForwardMaybe, "current to the head: it answers");
        assert!(segment_usable(&manifest, &at(50, 1)), "an older version brought forward by the journal answers");
        assert!(segment_usable(&manifest, &at(51, 3)), "past the head");
        assert!(!segment_usable(&manifest, &at(49, 3)), "one entry behind: never a 'no', whatever its version");
        assert!(!segment_usable(&manifest, &at(49, 9)));
        let v1 = held(encode_segment(&manifest.params, 9, seg, 9, &payload).unwrap());
        assert!(!segment_usable(&manifest, &v1), "no position named: not under a journal");
        assert_eq!(decide(&manifest, Some(&v1), &key), Decision::ForwardNoSegment);
        let other_gen = held(encode_segment_at(&manifest.params, 8, seg, 3, head, &payload).unwrap());
        assert!(!segment_usable(&manifest, &other_gen));
        // Without a journal, versions decide and positions do not matter.
        manifest.journal = None;
        assert!(segment_usable(&manifest, &at(0, 3)));
        assert!(!segment_usable(&manifest, &at(1_000, 2)));
    }

    #[test]
    fn fetches_are_shared_by_what_they_must_bring() {
        let (mut manifest, _) = setup();
        assert_eq!(wanted(&manifest, 0), Some(Wanted::Version(3)));
        assert_eq!(wanted(&manifest, manifest.params.segment_count), None);
        manifest.journal = Some(JournalPosition { added: 8, id_ms: 1, id_seq: 0 });
        assert_eq!(wanted(&manifest, 0), Some(Wanted::JournalAt(8)));
        manifest.segment_versions.clear();
        assert_eq!(wanted(&manifest, 0), Some(Wanted::JournalAt(8)), "a manifest naming its head alone");
        assert_eq!(wanted(&manifest, manifest.params.segment_count), None);
    }

    #[test]
    fn a_no_is_answered_only_while_its_manifest_is_fresh() {
        // A segment that took 4.5 s to load under a 5 s bound, for a manifest 1 s old.
        assert_eq!(answer_now(Decision::NotSeen, 1000.0, 5999.0, 5), Decision::NotSeen);
        assert_eq!(answer_now(Decision::NotSeen, 1000.0, 6000.0, 5), Decision::ForwardStale);
        assert_eq!(answer_now(Decision::NotSeen, 1000.0, 60_000.0, 5), Decision::ForwardStale);
        assert_eq!(answer_now(Decision::NotSeen, 1000.0, 999.0, 5), Decision::ForwardStale, "clock went back");
        // Forwards stay forwards, fresh or not.
        for d in [Decision::ForwardMaybe, Decision::ForwardNoSegment, Decision::ForwardStale] {
            assert_eq!(answer_now(d, 1000.0, 2000.0, 5), d);
            assert_eq!(answer_now(d, 1000.0, 9000.0, 5), d);
        }
    }

    #[test]
    fn fetches_get_what_is_left_of_the_bound_and_never_more_than_the_cap() {
        assert_eq!(fetch_budget_ms(1000.0, 1000.0, 5), Some(5000), "a manifest fetch gets all of S");
        assert_eq!(fetch_budget_ms(1000.0, 4500.5, 5), Some(1499));
        assert_eq!(fetch_budget_ms(1000.0, 5999.5, 5), None, "under a millisecond left");
        assert_eq!(fetch_budget_ms(1000.0, 6000.0, 5), None);
        assert_eq!(fetch_budget_ms(1000.0, 999.0, 5), None, "clock went back");
        assert_eq!(fetch_budget_ms(0.0, 0.0, 3600), Some(ORIGIN_TIMEOUT_CAP_MS), "a long S is capped");
    }
}
