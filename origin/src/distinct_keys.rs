//! How many *distinct* keys a stream of lookups named, in a fixed kilobyte: a HyperLogLog
//! sketch (Flajolet et al.; 1024 registers, about 3 % error, exact-ish below a few thousand by
//! linear counting), updated lock-free from any number of lookups at once.
//!
//! The automatic false-positive rebuild counts keys this way rather than lookups: a client that
//! replays a few hundred known false-positive keys over and over adds nothing after the first
//! time each, so it cannot make the observed rate pass the threshold by repetition (and to find
//! false positives of a new generation it must look up about 1/fp_rate new absent keys per one
//! found, each of which counts too).

use std::sync::atomic::{AtomicU8, Ordering};

/// Registers: 2^10, one byte each.
const BITS: u32 = 10;
const REGISTERS: usize = 1 << BITS;

/// The seed keys are hashed with here: fixed, and unlike any filter's (those are random).
const SEED: u64 = 0x6469_7374_696e_6374;

/// A distinct count of keys.
pub struct DistinctKeys {
    registers: Box<[AtomicU8]>,
}

impl Default for DistinctKeys {
    fn default() -> Self {
        DistinctKeys { registers: (0..REGISTERS).map(|_| AtomicU8::new(0)).collect() }
    }
}

impl DistinctKeys {
    /// Counts `key` (normalised bytes); a key counted before changes nothing.
    pub fn insert(&self, key: &[u8]) {
        let hash = bloomgate_filter::hash_key(key, SEED).block_bits;
        let register = (hash >> (64 - BITS)) as usize;
        // The rank of the first set bit of the rest, 1-based; the sentinel bit bounds it.
        let rank = ((hash << BITS) | (1 << (BITS - 1))).leading_zeros() as u8 + 1;
        // Read before writing: once the sketch has settled, nearly every key finds its register
        // at or above its rank, and a load leaves the cache line shared between cores where a
        // read-modify-write would take it from the others on every lookup.
        let slot = &self.registers[register];
        if slot.load(Ordering::Relaxed) < rank {
            slot.fetch_max(rank, Ordering::Relaxed);
        }
    }

    /// The estimated number of distinct keys counted.
    pub fn estimate(&self) -> u64 {
        let m = REGISTERS as f64;
        let (mut sum, mut zeros) = (0.0, 0usize);
        for register in self.registers.iter() {
            let rank = register.load(Ordering::Relaxed);
            sum += (-f64::from(rank)).exp2();
            zeros += usize::from(rank == 0);
        }
        let alpha = 0.7213 / (1.0 + 1.079 / m);
        let raw = alpha * m * m / sum;
        let estimate = if raw <= 2.5 * m && zeros > 0 { m * (m / zeros as f64).ln() } else { raw };
        estimate.round() as u64
    }

    /// Forgets every key.
    pub fn clear(&self) {
        for register in self.registers.iter() {
            register.store(0, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn within(estimate: u64, truth: u64, share: f64) -> bool {
        (estimate as f64 - truth as f64).abs() <= truth as f64 * share
    }

    #[test]
    fn distinct_keys_are_counted_and_repeats_are_not() {
        let sketch = DistinctKeys::default();
        assert_eq!(sketch.estimate(), 0);
        for round in 0..30 {
            for i in 0u32..400 {
                sketch.insert(&i.to_le_bytes());
            }
            assert!(within(sketch.estimate(), 400, 0.05), "round {round}: {}", sketch.estimate());
        }
        for i in 400u32..100_000 {
            sketch.insert(&i.to_le_bytes());
        }
        assert!(within(sketch.estimate(), 100_000, 0.10), "{}", sketch.estimate());
        sketch.clear();
        assert_eq!(sketch.estimate(), 0);
    }
}
