//! What the filter core's benches (and the scale test) share: their keys, seeds, sizing and
//! criterion's settings, so every figure is measured on the same keys, the same way.
//!
//! Keys are 32 pseudo-random bytes, like SHA-256 digests, the same on every run: key `i` of
//! stream `s` is built from a bijection of `(s, i)`, so keys of different streams or indices
//! never collide and a "miss" stream really was never inserted.
#![allow(dead_code)] // each bench uses its own part

use bloomgate_filter::params::best_k;
use bloomgate_filter::Params;
use criterion::Criterion;
use std::time::Duration;

/// Our filters' seed.
pub const OUR_SEED: u64 = 0x6265_6e63_685f_7631;
/// fastbloom's seed.
pub const FASTBLOOM_SEED: u128 = 0x6661_7374_626c_6f6f_6d5f_7365_6564_3137;
/// Bits per key of the filters compared side by side.
pub const BITS_PER_KEY: u64 = 10;

/// The stream of keys the filters are filled with.
pub const INSERTED: u64 = 1;
/// A stream of keys never inserted: lookups of absent keys.
pub const MISSES: u64 = 2;

/// splitmix64's finaliser: a bijection on u64.
fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// Key `i` of stream `stream`: 32 pseudo-random bytes whose first word is a bijection of
/// `(stream, i)` (for `i` below 2^40).
pub fn key(stream: u64, i: u64) -> [u8; 32] {
    let counter = (stream << 40) | i;
    let mut out = [0u8; 32];
    for (j, chunk) in out.chunks_exact_mut(8).enumerate() {
        let word = mix(counter.wrapping_add((j as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)));
        chunk.copy_from_slice(&word.to_le_bytes());
    }
    out
}

/// The first `n` keys of stream 0.
pub fn keys(n: usize) -> Vec<[u8; 32]> {
    (0..n as u64).map(|i| key(0, i)).collect()
}

/// Our filter for `n` keys at [`BITS_PER_KEY`]: exactly 10 bits per key where 512 divides
/// 10 n (10^8), else one block more (10^6: 19 532 blocks, 10.0004 bits per key), and the best
/// k for it; one-block segments so no segment rounding adds bits.
pub fn our_params(n: u64) -> Params {
    let blocks = (n * BITS_PER_KEY).div_ceil(512);
    Params::new(OUR_SEED, best_k(BITS_PER_KEY as f64), 0, blocks as u32).expect("valid params")
}

/// The bench's `main`: `target` run by criterion with 50 samples, after `warm_up` seconds of
/// warm-up, over `measure` seconds.
#[allow(unused_macros)] // the scale test shares the keys, not the harness
macro_rules! bench_main {
    ($target:ident, warm_up = $warm_up:literal, measure = $measure:literal) => {
        criterion::criterion_group! {
            name = benches;
            config = common::criterion(
                std::time::Duration::from_secs($warm_up),
                std::time::Duration::from_secs($measure),
            );
            targets = $target
        }
        criterion::criterion_main!(benches);
    };
}

/// Criterion with 50 samples, after `warm_up`, over `measurement`.
pub fn criterion(warm_up: Duration, measurement: Duration) -> Criterion {
    Criterion::default().warm_up_time(warm_up).measurement_time(measurement).sample_size(50)
}
