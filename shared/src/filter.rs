//! The in-memory blocked Bloom filter: a key picks one 512-bit block and sets k bits in it, so
//! a lookup costs one cache line, one memory access.

use crate::block::{probe_mask, Block, BLOCK_BITS, BLOCK_BYTES};
use crate::hash::{hash_key, KeyHash};
use crate::memory::prefetch;
use crate::pages::{try_blocks, Pages};
use crate::params::Params;
use alloc::vec::Vec;

/// Keys looked up per round in [`BloomFilter::may_contain_many`]: enough outstanding cache
/// misses to fill a core's line-fill buffers, few enough that prefetched lines are still in L1
/// when tested.
const BATCH: usize = 32;

/// A blocked Bloom filter held in memory. Keys are *normalised* bytes (see
/// [`KeyFormat::normalize`](crate::KeyFormat::normalize)).
///
/// `insert` needs `&mut self`; [`insert_shared`](Self::insert_shared) takes `&self` and uses
/// atomic ORs, so threads can build one filter together (the filter is `Sync`).
pub struct BloomFilter {
    params: Params,
    blocks: Vec<Block>,
}

impl BloomFilter {
    /// An empty filter with these parameters. Allocates `params.total_bytes()`; on Linux, a bit
    /// array of 16 MiB or more is first advised onto transparent huge pages (see
    /// [`new_with_huge_pages`](Self::new_with_huge_pages)).
    ///
    /// # Panics
    /// If the memory cannot be had; [`try_new`](Self::try_new) returns an error instead.
    pub fn new(params: Params) -> BloomFilter {
        Self::try_new(params).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Like [`new`](Self::new), but refuses instead of aborting the process when the memory
    /// cannot be had: a filter's size comes from an operator's request, and one too large must
    /// be an error, not a crash (at start-up, again and again).
    pub fn try_new(params: Params) -> Result<BloomFilter, AllocError> {
        Self::try_new_on(params, Pages::BySize)
    }

    /// [`try_new`](Self::try_new) with the huge-page advice of
    /// [`new_with_huge_pages`](Self::new_with_huge_pages) whatever the size.
    #[cfg(feature = "std")]
    pub fn try_new_with_huge_pages(params: Params) -> Result<BloomFilter, AllocError> {
        Self::try_new_on(params, Pages::Huge)
    }

    /// Like [`new`](Self::new), but on Linux advises the kernel to back the bit array with
    /// transparent huge pages whatever its size. Worth it for filters of hundreds of MB: each
    /// lookup then misses the cache once instead of missing the cache *and* the TLB. Elsewhere,
    /// or when the kernel declines, it is the same as `new`.
    #[cfg(feature = "std")]
    pub fn new_with_huge_pages(params: Params) -> BloomFilter {
        Self::try_new_on(params, Pages::Huge).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Like [`new`](Self::new), but never advises huge pages: the bit array gets the kernel's
    /// default pages (4 KiB under THP `madvise`). For measuring what the advice is worth, and for
    /// hosts where a huge-page fault's compaction stall is worse than the page walks.
    pub fn new_on_ordinary_pages(params: Params) -> BloomFilter {
        Self::try_new_on(params, Pages::Ordinary).unwrap_or_else(|e| panic!("{e}"))
    }

    fn try_new_on(params: Params, pages: Pages) -> Result<BloomFilter, AllocError> {
        Ok(BloomFilter { params, blocks: try_blocks(params.total_blocks(), pages)? })
    }

    /// The parameters this filter was built with.
    pub fn params(&self) -> &Params {
        &self.params
    }

    /// Adds a key.
    #[inline]
    pub fn insert(&mut self, key: &[u8]) {
        let hash = hash_key(key, self.params.seed);
        self.insert_hash(&hash);
    }

    /// Adds a key by its hash.
    #[inline]
    pub fn insert_hash(&mut self, hash: &KeyHash) {
        let block = self.params.locate(hash).block as usize;
        // Fetch the line while the mask is computed (see `may_contain_hash`).
        prefetch(&self.blocks[block]);
        let mask = probe_mask(hash.probe_bits, self.params.k);
        self.blocks[block].set(&mask);
    }

    /// Adds a key through a shared reference, with atomic ORs: the concurrent inserter used to
    /// build a filter from many threads.
    #[inline]
    pub fn insert_shared(&self, key: &[u8]) {
        self.insert_hash_shared(&hash_key(key, self.params.seed));
    }

    /// [`insert_shared`](Self::insert_shared) for a key already hashed with this filter's seed.
    #[inline]
    pub fn insert_hash_shared(&self, hash: &KeyHash) {
        let block = self.params.locate(hash).block as usize;
        self.blocks[block].set_shared(&probe_mask(hash.probe_bits, self.params.k));
    }

    /// False means the key was certainly never inserted; true means it may have been.
    #[inline]
    pub fn may_contain(&self, key: &[u8]) -> bool {
        self.may_contain_hash(&hash_key(key, self.params.seed))
    }

    /// [`may_contain`](Self::may_contain) for a key already hashed with this filter's seed.
    #[inline]
    pub fn may_contain_hash(&self, hash: &KeyHash) -> bool {
        let block = &self.blocks[self.params.locate(hash).block as usize];
        // Start the cache miss before computing the mask, so the load that waits for the line
        // comes last. A waiting load holds up retirement and the reorder buffer fills behind it;
        // a prefetch does not. So the next call's prefetch issues while this call still waits,
        // and back-to-back single lookups overlap their misses (measured at 10^8 keys, see
        // docs/bench/notes/core-filter.md). A hint: it changes no answer.
        prefetch(block);
        block.contains(&probe_mask(hash.probe_bits, self.params.k))
    }

    /// Looks up many keys at once, writing one answer per key into `out`. Hashes a round of keys
    /// and prefetches their blocks first, then tests them, so the memory accesses overlap
    /// instead of queueing: several times faster per key than one-by-one lookups once the
    /// filter is larger than the CPU caches.
    ///
    /// # Panics
    /// If `out` is shorter than `keys`.
    pub fn may_contain_many<K: AsRef<[u8]>>(&self, keys: &[K], out: &mut [bool]) {
        assert!(out.len() >= keys.len(), "may_contain_many: `out` is shorter than `keys`");
        let mut round = [(0usize, 0u64); BATCH];
        for (keys, out) in keys.chunks(BATCH).zip(out.chunks_mut(BATCH)) {
            for (slot, key) in round.iter_mut().zip(keys) {
                let hash = hash_key(key.as_ref(), self.params.seed);
                let block = self.params.locate(&hash).block as usize;
                prefetch(&self.blocks[block]);
                *slot = (block, hash.probe_bits);
            }
            for (answer, (block, probe_bits)) in out.iter_mut().zip(&round[..keys.len()]) {
                *answer = self.blocks[*block].contains(&probe_mask(*probe_bits, self.params.k));
            }
        }
    }

    /// Number of set bits.
    pub fn count_ones(&self) -> u64 {
        self.blocks.iter().map(|b| u64::from(b.count_ones())).sum()
    }

    /// Share of bits set, 0.0..=1.0.
    pub fn fill_ratio(&self) -> f64 {
        self.count_ones() as f64 / (self.blocks.len() as f64 * f64::from(BLOCK_BITS))
    }

    /// Estimated number of distinct keys inserted, from the fill ratio.
    pub fn estimated_len(&self) -> f64 {
        self.params.estimated_len(self.count_ones())
    }

    /// The payload bytes of segment `index` (what Redis stores and the wire format carries).
    ///
    /// # Panics
    /// If `index >= params.segment_count`.
    pub fn segment_payload(&self, index: u32) -> Vec<u8> {
        let per = self.params.segment_blocks() as usize;
        let start = index as usize * per;
        payload_of(&self.blocks[start..start + per])
    }

    /// [`merge_segment_payload`](Self::merge_segment_payload) through a shared reference,
    /// with atomic ORs: concurrent inserts into the same segment are kept, never overwritten.
    pub fn merge_segment_payload_shared(&self, index: u32, payload: &[u8]) -> bool {
        let Some((start, words)) = segment_words(&self.params, index, payload) else {
            return false;
        };
        for (block, words) in self.blocks[start..].iter().zip(words) {
            block.set_shared(&words);
        }
        true
    }

    /// ORs a segment's payload (e.g. read back from Redis) into this filter. Returns false, and
    /// changes nothing, if the index or length does not fit these parameters.
    pub fn merge_segment_payload(&mut self, index: u32, payload: &[u8]) -> bool {
        let Some((start, words)) = segment_words(&self.params, index, payload) else {
            return false;
        };
        for (block, words) in self.blocks[start..].iter_mut().zip(words) {
            block.set(&words);
        }
        true
    }
}

/// Where segment `index` starts among a filter's blocks, and `payload`'s words block by block;
/// `None` if the index or the payload's length does not fit `params`.
fn segment_words<'p>(
    params: &Params,
    index: u32,
    payload: &'p [u8],
) -> Option<(usize, impl Iterator<Item = [u64; 8]> + 'p)> {
    let per = params.segment_blocks() as usize;
    if index >= params.segment_count || payload.len() != per * BLOCK_BYTES {
        return None;
    }
    let words = payload.chunks_exact(BLOCK_BYTES).map(|bytes| {
        let mut array = [0u8; BLOCK_BYTES];
        array.copy_from_slice(bytes);
        crate::block::words_from_bytes(&array)
    });
    Some((index as usize * per, words))
}

/// The memory for a filter could not be allocated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AllocError {
    /// Bytes asked for.
    pub bytes: u64,
}

impl core::fmt::Display for AllocError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "cannot allocate {} bytes for the filter's bits", self.bytes)
    }
}

#[cfg(feature = "std")]
impl std::error::Error for AllocError {}

/// The payload bytes of `blocks`, block after block (what Redis stores and the wire carries).
pub(crate) fn payload_of(blocks: &[Block]) -> Vec<u8> {
    let mut out = Vec::with_capacity(blocks.len() * BLOCK_BYTES);
    for block in blocks {
        out.extend_from_slice(&block.to_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::params::SizingOptions;
    use alloc::collections::BTreeSet;
    use proptest::prelude::*;

    /// Deterministic pseudo-random 32-byte keys (splitmix64), distinct for distinct `i`.
    fn key(i: u64, salt: u64) -> [u8; 32] {
        let mut z = i.wrapping_add(salt.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let mut out = [0u8; 32];
        for chunk in out.chunks_exact_mut(8) {
            z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut x = z;
            x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            chunk.copy_from_slice(&(x ^ (x >> 31)).to_le_bytes());
        }
        out[0..8].copy_from_slice(&i.to_le_bytes());
        out[8..16].copy_from_slice(&salt.to_le_bytes());
        out
    }

    proptest! {
        #[test]
        fn never_a_false_negative(keys in proptest::collection::hash_set(proptest::collection::vec(any::<u8>(), 1..40), 1..400),
                                  probes in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 1..40), 0..200),
                                  seed in any::<u64>()) {
            let params = Params::for_capacity_with(keys.len() as u64, 0.01, SizingOptions { seed, ..Default::default() }).unwrap();
            let mut filter = BloomFilter::new(params);
            for k in &keys { filter.insert(k); }
            for k in &keys { prop_assert!(filter.may_contain(k)); }
            // The batched path agrees with the single path on members and strangers alike.
            let all: alloc::vec::Vec<&alloc::vec::Vec<u8>> = keys.iter().chain(probes.iter()).collect();
            let mut out = alloc::vec![false; all.len()];
            filter.may_contain_many(&all, &mut out);
            for (k, answer) in all.iter().zip(&out) {
                prop_assert_eq!(*answer, filter.may_contain(k));
                if keys.contains(*k) { prop_assert!(*answer); }
            }
        }
    }

    #[test]
    fn measured_fpr_matches_the_blocked_formula_at_a_million_keys() {
        let n = 1_000_000u64;
        // 10 bits per key exactly: 10^6 * 10 / 512 blocks (one-block segments), the best k.
        let blocks = n * 10 / 512;
        let params = Params::new(42, crate::params::best_k(10.0), 0, blocks as u32).unwrap();
        let mut filter = BloomFilter::new(params);
        for i in 0..n {
            filter.insert(&key(i, 1));
        }
        let trials = 4_000_000u64;
        let false_positives = (0..trials).filter(|&i| filter.may_contain(&key(i, 2))).count();
        let measured = false_positives as f64 / trials as f64;
        let expected = params.expected_fp_rate(n);
        assert!((measured - expected).abs() <= 0.10 * expected, "measured {measured}, expected {expected}");
        assert!(measured <= 0.0096, "measured {measured}");
        std::println!("measured FPR {measured}, expected {expected}");
        let est = filter.estimated_len();
        assert!((est - n as f64).abs() < 0.01 * n as f64, "estimated {est}");
    }

    #[test]
    fn sized_filter_meets_its_target() {
        let n = 200_000u64;
        let params = Params::for_capacity(n, 0.01).unwrap();
        let mut filter = BloomFilter::new(params);
        (0..n).for_each(|i| filter.insert(&key(i, 3)));
        let trials = 500_000u64;
        let fp = (0..trials).filter(|&i| filter.may_contain(&key(i, 4))).count() as f64 / trials as f64;
        assert!(fp <= 0.011, "{fp}");
    }

    #[test]
    fn concurrent_inserts_equal_sequential_ones() {
        let params = Params::for_capacity(50_000, 0.01).unwrap();
        let shared = BloomFilter::new(params);
        std::thread::scope(|s| {
            for t in 0..4u64 {
                let shared = &shared;
                s.spawn(move || (t..50_000).step_by(4).for_each(|i| shared.insert_shared(&key(i, 5))));
            }
        });
        let mut sequential = BloomFilter::new(params);
        (0..50_000).for_each(|i| sequential.insert(&key(i, 5)));
        for s in 0..params.segment_count {
            assert_eq!(shared.segment_payload(s), sequential.segment_payload(s));
        }
    }

    #[test]
    fn segments_round_trip_through_payloads() {
        let params =
            Params::for_capacity_with(30_000, 0.01, SizingOptions { segment_bytes: 4096, ..Default::default() })
                .unwrap();
        assert!(params.segment_count > 4);
        let mut original = BloomFilter::new(params);
        let members: BTreeSet<[u8; 32]> = (0..30_000).map(|i| key(i, 6)).collect();
        members.iter().for_each(|k| original.insert(k));
        let mut copy = BloomFilter::new(params);
        for s in 0..params.segment_count {
            assert!(copy.merge_segment_payload(s, &original.segment_payload(s)));
        }
        assert!(members.iter().all(|k| copy.may_contain(k)));
        assert_eq!(copy.count_ones(), original.count_ones());
        assert!(!copy.merge_segment_payload(params.segment_count, &original.segment_payload(0)));
        assert!(!copy.merge_segment_payload(0, &[0u8; 10]));
    }

    #[test]
    fn huge_page_filter_behaves_like_a_plain_one() {
        let params = Params::for_capacity(1_000_000, 0.01).unwrap();
        let mut filter = BloomFilter::new_with_huge_pages(params);
        (0..1000).for_each(|i| filter.insert(&key(i, 7)));
        assert!((0..1000).all(|i| filter.may_contain(&key(i, 7))));
        assert!(filter.count_ones() >= 1000 * 6 / 2, "bits were set");
    }

    #[test]
    fn an_impossible_size_is_an_error_not_an_abort() {
        // 2^16 blocks per segment × 2^32 - 1 segments × 64 bytes: far beyond any machine.
        let params = Params::new(1, 6, 16, u32::MAX).unwrap();
        let err = BloomFilter::try_new(params).err().expect("allocation must be refused");
        assert_eq!(err.bytes, params.total_bytes());
        assert!(BloomFilter::try_new(Params::new(1, 6, 2, 3).unwrap()).is_ok());
    }

    #[test]
    fn a_shared_merge_keeps_what_was_inserted_meanwhile() {
        let params = Params::for_capacity_with(10_000, 0.01, SizingOptions { seed: 3, segment_bytes: 4096 }).unwrap();
        let mut built = BloomFilter::new(params);
        let live = BloomFilter::new(params);
        for i in 0..5_000 {
            built.insert(&key(i, 1));
            live.insert_shared(&key(i, 2));
        }
        for index in 0..params.segment_count {
            assert!(live.merge_segment_payload_shared(index, &built.segment_payload(index)));
        }
        assert!(!live.merge_segment_payload_shared(params.segment_count, &built.segment_payload(0)));
        for i in 0..5_000 {
            assert!(live.may_contain(&key(i, 1)) && live.may_contain(&key(i, 2)), "key {i}");
        }
    }
}
