//! A run of consecutive segments of a filter, built on its own: what a rebuild holds when the
//! whole filter would not fit its memory budget. A key's bits lie in one block, so in one
//! segment: the keys whose segment is in the run set exactly the bits the whole filter would
//! set there, and the others are skipped. Building a filter run by run, each from every key,
//! gives the same segment payloads as building it whole.

use crate::block::{probe_mask, Block, BLOCK_BYTES};
use crate::filter::{payload_of, AllocError};
use crate::hash::{hash_key, KeyHash};
use crate::pages::{try_blocks, Pages};
use crate::params::Params;
use alloc::vec::Vec;
use core::ops::Range;

/// The blocks of segments `segments` of a filter of `params`, for concurrent inserts (atomic
/// ORs, like [`BloomFilter::insert_shared`](crate::BloomFilter::insert_shared)).
pub struct SegmentRun {
    params: Params,
    segments: Range<u32>,
    blocks: Vec<Block>,
}

impl SegmentRun {
    /// Empty blocks for `segments` (clamped to the filter's), or an error when the memory
    /// cannot be had.
    pub fn try_new(params: Params, segments: Range<u32>) -> Result<SegmentRun, AllocError> {
        let segments = segments.start.min(params.segment_count)..segments.end.min(params.segment_count);
        let blocks = try_blocks(u64::from(segments.end - segments.start) * params.segment_blocks(), Pages::Huge)?;
        Ok(SegmentRun { params, segments, blocks })
    }

    /// The segments this run holds.
    pub fn segments(&self) -> Range<u32> {
        self.segments.clone()
    }

    /// Bytes of bits it holds.
    pub fn bytes(&self) -> u64 {
        self.blocks.len() as u64 * BLOCK_BYTES as u64
    }

    /// Adds a key if its segment is in the run; whether it was.
    #[inline]
    pub fn insert_shared(&self, key: &[u8]) -> bool {
        self.insert_hash_shared(&hash_key(key, self.params.seed))
    }

    /// [`insert_shared`](Self::insert_shared) for a key already hashed with the filter's seed.
    #[inline]
    pub fn insert_hash_shared(&self, hash: &KeyHash) -> bool {
        let location = self.params.locate(hash);
        if !self.segments.contains(&location.segment) {
            return false;
        }
        let first_block = u64::from(self.segments.start) * self.params.segment_blocks();
        let block = (location.block - first_block) as usize;
        self.blocks[block].set_shared(&probe_mask(hash.probe_bits, self.params.k));
        true
    }

    /// The payload bytes of segment `index`, as [`BloomFilter::segment_payload`] gives them;
    /// None when the run does not hold it.
    ///
    /// [`BloomFilter::segment_payload`]: crate::BloomFilter::segment_payload
    pub fn segment_payload(&self, index: u32) -> Option<Vec<u8>> {
        if !self.segments.contains(&index) {
            return None;
        }
        let per = self.params.segment_blocks() as usize;
        let start = (index - self.segments.start) as usize * per;
        Some(payload_of(&self.blocks[start..start + per]))
    }
}

/// The runs a filter of `params` is built in when at most `budget_bytes` of bits may be held
/// at once: consecutive, covering every segment once, each as long as the budget allows (one
/// segment at least, whatever the budget).
pub fn segment_runs(params: &Params, budget_bytes: u64) -> Vec<Range<u32>> {
    let per_run = (budget_bytes / params.segment_bytes()).clamp(1, u64::from(u32::MAX)) as u32;
    let mut runs = Vec::new();
    let mut start = 0u32;
    while start < params.segment_count {
        let end = start.saturating_add(per_run).min(params.segment_count);
        runs.push(start..end);
        start = end;
    }
    runs
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::BloomFilter;

    fn params() -> Params {
        // 8 segments of 2 blocks (128 bytes each).
        Params::new(7, 6, 1, 8).unwrap()
    }

    #[test]
    fn runs_cover_every_segment_once_each_within_the_budget() {
        let p = params();
        let whole = Vec::from([Range { start: 0, end: 8 }]);
        assert_eq!(segment_runs(&p, u64::MAX), whole);
        assert_eq!(segment_runs(&p, 8 * 128), whole);
        assert_eq!(segment_runs(&p, 3 * 128), [0..3, 3..6, 6..8]);
        assert_eq!(segment_runs(&p, 3 * 128 + 127), [0..3, 3..6, 6..8], "a part of a segment buys nothing");
        assert_eq!(segment_runs(&p, 0), (0..8).map(|s| s..s + 1).collect::<Vec<_>>(), "one segment at least");
    }

    #[test]
    fn a_filter_built_run_by_run_has_the_payloads_of_one_built_whole() {
        let p = params();
        let keys: Vec<[u8; 8]> = (0u64..2_000).map(|i| i.to_le_bytes()).collect();
        let whole = BloomFilter::new(p);
        for key in &keys {
            whole.insert_shared(key);
        }
        for budget in [128, 3 * 128, 8 * 128] {
            let mut seen = 0;
            for run in segment_runs(&p, budget) {
                let built = SegmentRun::try_new(p, run.clone()).unwrap();
                assert_eq!(built.bytes(), u64::from(run.end - run.start) * 128);
                seen += keys.iter().filter(|key| built.insert_shared(key.as_slice())).count();
                for index in run.clone() {
                    assert_eq!(built.segment_payload(index), Some(whole.segment_payload(index)), "segment {index}");
                }
                assert_eq!(built.segment_payload(run.end), None);
            }
            assert_eq!(seen, keys.len(), "every key lands in exactly one run (budget {budget})");
        }
    }

    #[test]
    fn a_run_past_the_filter_is_clamped_to_it() {
        let run = SegmentRun::try_new(params(), 6..20).unwrap();
        assert_eq!(run.segments(), 6..8);
        assert_eq!(run.bytes(), 2 * 128);
    }
}
