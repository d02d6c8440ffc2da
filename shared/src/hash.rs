//! The key hash: XXH3-128 of the normalised key bytes with the filter's seed.
//!
//! Stable by construction: the input is the key's bytes exactly as normalised (no length
//! prefix, no `core::hash::Hash`, no `usize`), the seed is stored in every segment header, and
//! XXH3's output is defined in little-endian arithmetic, so wasm32 and x86_64 agree bit for bit
//! (the golden vectors check it on both).

use xxhash_rust::xxh3::xxh3_128_with_seed;

/// A key's 128-bit hash, split into the two halves the filter uses independently.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct KeyHash {
    /// Low 64 bits: chooses the block (by multiply-shift over the filter's block count).
    pub block_bits: u64,
    /// High 64 bits: chooses the k bit positions inside the block.
    pub probe_bits: u64,
}

/// Hashes normalised key bytes with a filter's seed.
#[inline]
pub fn hash_key(normalised_key: &[u8], seed: u64) -> KeyHash {
    let h = xxh3_128_with_seed(normalised_key, seed);
    KeyHash { block_bits: h as u64, probe_bits: (h >> 64) as u64 }
}

/// Maps a uniform 64-bit value onto `0..n` without modulo bias or 32-bit truncation
/// (Lemire's multiply-shift: the high word of the 128-bit product).
#[inline]
pub fn reduce(x: u64, n: u64) -> u64 {
    ((u128::from(x) * u128::from(n)) >> 64) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seed_changes_the_hash() {
        assert_ne!(hash_key(b"key", 1), hash_key(b"key", 2));
    }

    #[test]
    fn reduce_covers_the_range_and_stays_in_it() {
        assert_eq!(reduce(0, 10), 0);
        assert_eq!(reduce(u64::MAX, 10), 9);
        // 64-bit ranges beyond u32 must be reachable (10^9-key filters have ~2^31 blocks).
        let n = 3u64 << 33;
        assert!(reduce(u64::MAX, n) > u64::from(u32::MAX));
        assert_eq!(reduce(u64::MAX, n), n - 1);
    }
}
