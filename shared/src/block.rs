//! One 512-bit block: which k bits a key sets in it, and how they are tested.
//!
//! Bit numbering follows Redis (`SETBIT`, `GETRANGE`, `BITFIELD`): bit `p` of a block is bit
//! `7 - p % 8` of byte `p / 8`, i.e. most significant bit first. So a block's 64 bytes mean the
//! same thing in Redis, on the wire, and in memory, where they are held as eight big-endian
//! `u64` words (bit `p` is bit `63 - p % 64` of word `p / 64`).

use core::sync::atomic::{AtomicU64, Ordering};

/// Bytes in a block: one cache line.
pub const BLOCK_BYTES: usize = 64;
/// Bits in a block.
pub const BLOCK_BITS: u32 = 512;
/// Most bits a key may set in its block.
pub const MAX_K: u8 = 16;

/// The probe generator: a 64-bit linear congruential step (Knuth's MMIX constants), seeded with
/// the key's `probe_bits`; each step's top nine bits name a candidate bit. Part of the format:
/// changing either constant changes every filter's bits.
const PROBE_MUL: u64 = 0x5851_F42D_4C95_7F2D;
const PROBE_INC: u64 = 0x1405_7B7E_F767_814F;

/// The k *distinct* bit positions (0..512) a key with these `probe_bits` sets in its block, in
/// the order drawn. Distinct, because a key that collided with itself would set fewer bits and
/// raise the false-positive rate (by about 1.5 % at k = 6); the sizing formula assumes exactly
/// this: k distinct bits, uniformly chosen.
#[inline]
pub fn probe_positions(probe_bits: u64, k: u8) -> ([u16; MAX_K as usize], usize) {
    let k = usize::from(k.clamp(1, MAX_K));
    let mut positions = [0u16; MAX_K as usize];
    let mut seen = [0u64; 8];
    let mut found = 0;
    let mut x = probe_bits;
    while found < k {
        x = x.wrapping_mul(PROBE_MUL).wrapping_add(PROBE_INC);
        let p = (x >> 55) as u16;
        let bit = 1u64 << (63 - (p & 63));
        let word = &mut seen[usize::from(p >> 6)];
        if *word & bit == 0 {
            *word |= bit;
            positions[found] = p;
            found += 1;
        }
    }
    (positions, k)
}

/// The block-sized mask of a key's k bits, as eight big-endian words.
#[inline]
pub fn probe_mask(probe_bits: u64, k: u8) -> [u64; 8] {
    let mut mask = [0u64; 8];
    let mut set = 0u8;
    let k = k.clamp(1, MAX_K);
    let mut x = probe_bits;
    while set < k {
        x = x.wrapping_mul(PROBE_MUL).wrapping_add(PROBE_INC);
        let p = (x >> 55) as usize;
        let bit = 1u64 << (63 - (p & 63));
        let word = &mut mask[p >> 6];
        set += u8::from(*word & bit == 0);
        *word |= bit;
    }
    mask
}

/// True when every bit of `mask` is set in `words`.
#[inline]
pub fn words_contain(words: &[u64; 8], mask: &[u64; 8]) -> bool {
    let mut missing = 0u64;
    for i in 0..8 {
        missing |= mask[i] & !words[i];
    }
    missing == 0
}

/// Reads a block's 64 bytes (as stored in Redis or a segment payload) into words.
#[inline]
pub fn words_from_bytes(bytes: &[u8; BLOCK_BYTES]) -> [u64; 8] {
    let mut words = [0u64; 8];
    for (word, chunk) in words.iter_mut().zip(bytes.chunks_exact(8)) {
        let mut be = [0u8; 8];
        be.copy_from_slice(chunk);
        *word = u64::from_be_bytes(be);
    }
    words
}

/// True when every bit of `mask` is set in the block stored as `bytes`.
#[inline]
pub fn bytes_contain(bytes: &[u8; BLOCK_BYTES], mask: &[u64; 8]) -> bool {
    words_contain(&words_from_bytes(bytes), mask)
}

/// A block in memory, aligned to a cache line so a lookup touches exactly one line. Atomic words
/// let many threads OR keys in at once during a rebuild; single-threaded code reaches the plain
/// words through `&mut` at no atomic cost.
#[repr(C, align(64))]
#[derive(Default)]
pub struct Block {
    words: [AtomicU64; 8],
}

impl Block {
    /// A block with the given words.
    pub fn from_words(words: [u64; 8]) -> Block {
        Block { words: words.map(AtomicU64::new) }
    }

    /// The block's words (relaxed loads: plain loads on x86_64 and wasm32).
    #[inline]
    pub fn load(&self) -> [u64; 8] {
        core::array::from_fn(|i| self.words[i].load(Ordering::Relaxed))
    }

    /// True when every bit of `mask` is set.
    #[inline]
    pub fn contains(&self, mask: &[u64; 8]) -> bool {
        let mut missing = 0u64;
        for (word, m) in self.words.iter().zip(mask) {
            missing |= m & !word.load(Ordering::Relaxed);
        }
        missing == 0
    }

    /// Sets the bits of `mask`, non-atomically (the caller holds the only reference).
    #[inline]
    pub fn set(&mut self, mask: &[u64; 8]) {
        for (word, m) in self.words.iter_mut().zip(mask) {
            *word.get_mut() |= m;
        }
    }

    /// Sets the bits of `mask` with atomic ORs, safe against concurrent setters. Skips words the
    /// mask does not touch, so a key costs at most k atomic operations.
    #[inline]
    pub fn set_shared(&self, mask: &[u64; 8]) {
        for (word, m) in self.words.iter().zip(mask) {
            if *m != 0 {
                word.fetch_or(*m, Ordering::Relaxed);
            }
        }
    }

    /// The block as its 64 stored bytes.
    pub fn to_bytes(&self) -> [u8; BLOCK_BYTES] {
        let mut out = [0u8; BLOCK_BYTES];
        for (chunk, word) in out.chunks_exact_mut(8).zip(self.load()) {
            chunk.copy_from_slice(&word.to_be_bytes());
        }
        out
    }

    /// Number of set bits.
    pub fn count_ones(&self) -> u32 {
        self.load().iter().map(|w| w.count_ones()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_are_distinct_inside_the_block_and_match_the_mask() {
        for probe in [0u64, 1, u64::MAX, 0x0123_4567_89ab_cdef] {
            for k in 1..=MAX_K {
                let (positions, n) = probe_positions(probe, k);
                assert_eq!(n, usize::from(k));
                let positions = &positions[..n];
                assert!(positions.iter().all(|p| u32::from(*p) < BLOCK_BITS));
                let mask = probe_mask(probe, k);
                assert_eq!(mask.iter().map(|w| w.count_ones()).sum::<u32>(), u32::from(k));
                for p in positions {
                    assert_ne!(mask[usize::from(p >> 6)] & (1u64 << (63 - (p & 63))), 0);
                }
            }
        }
    }

    #[test]
    fn bit_numbering_is_msb_first_like_redis_setbit() {
        // Redis: SETBIT key 0 1 sets 0x80 in byte 0; SETBIT key 9 1 sets 0x40 in byte 1.
        let mut bytes = [0u8; BLOCK_BYTES];
        bytes[0] = 0x80;
        bytes[1] = 0x40;
        let words = words_from_bytes(&bytes);
        assert_eq!(words[0], (1u64 << 63) | (1u64 << (63 - 9)));
        assert_eq!(Block::from_words(words).to_bytes(), bytes);
    }

    #[test]
    fn a_mask_is_contained_once_set_and_not_before() {
        let mask = probe_mask(0xfeed_beef_dead_cafe, 8);
        let mut block = Block::default();
        assert!(!block.contains(&mask));
        block.set(&mask);
        assert!(block.contains(&mask));
        assert!(bytes_contain(&block.to_bytes(), &mask));
        let shared = Block::default();
        shared.set_shared(&mask);
        assert_eq!(shared.load(), block.load());
    }
}
