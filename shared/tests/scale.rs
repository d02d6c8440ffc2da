//! The false-positive guarantee at production scale: 10^8 keys at exactly 10 bits per key.
//!
//! # Running
//! `cargo test --release -p bloomgate-filter --test scale -- --ignored --nocapture`
//! (`#[ignore]`d by default: it allocates 125 MB and takes about a minute in release, far more
//! in debug). It prints the measured figures; BENCHMARKS.md records them.

use bloomgate_filter::params::best_k;
use bloomgate_filter::{BloomFilter, Params};
use std::time::Instant;

/// Keys inserted.
const N: u64 = 100_000_000;
/// Keys probed that were never inserted.
const MISS_PROBES: u64 = 10_000_000;
/// Inserted keys checked for false negatives (every `N / MEMBER_SAMPLE`-th one).
const MEMBER_SAMPLE: u64 = 1_000_000;
const INSERTED: u64 = 1;
const MISSES: u64 = 2;
const THREADS: u64 = 2;

/// splitmix64's finaliser: a bijection on u64.
fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// Key `i` of `stream`: 32 pseudo-random bytes (like a SHA-256 digest). The first word is a
/// bijection of `(stream, i)`, so the miss stream never meets an inserted key.
fn key(stream: u64, i: u64) -> [u8; 32] {
    let counter = (stream << 40) | i;
    let mut out = [0u8; 32];
    for (j, chunk) in out.chunks_exact_mut(8).enumerate() {
        let word = mix(counter.wrapping_add((j as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)));
        chunk.copy_from_slice(&word.to_le_bytes());
    }
    out
}

#[test]
#[ignore = "allocates 125 MB and inserts 10^8 keys; run in release, see the module doc"]
fn hundred_million_keys_at_ten_bits_per_key() {
    // 10^9 bits is exactly 1 953 125 blocks of 512: one-block segments keep it exact.
    let blocks = N * 10 / 512;
    assert_eq!(blocks * 512, N * 10);
    let params = Params::new(0x7363_616c_6531_3038, best_k(10.0), 0, blocks as u32).unwrap();
    assert_eq!(params.bits_per_key(N), 10.0);

    let started = Instant::now();
    let filter = BloomFilter::new(params);
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let filter = &filter;
            s.spawn(move || {
                for i in (t..N).step_by(THREADS as usize) {
                    filter.insert_shared(&key(INSERTED, i));
                }
            });
        }
    });
    let built = started.elapsed();

    let started = Instant::now();
    let false_positives: u64 = (0..MISS_PROBES).map(|i| u64::from(filter.may_contain(&key(MISSES, i)))).sum();
    let probed = started.elapsed();
    let measured = false_positives as f64 / MISS_PROBES as f64;
    let expected = params.expected_fp_rate(N);

    let stride = N / MEMBER_SAMPLE;
    let false_negatives = (0..MEMBER_SAMPLE).filter(|j| !filter.may_contain(&key(INSERTED, j * stride))).count();
    let estimated = filter.estimated_len();

    println!(
        "n={N} bits/key={} k={} blocks={blocks}: built with {THREADS} threads in {built:.1?}; \
         {MISS_PROBES} miss probes in {probed:.1?}: {false_positives} false positives, \
         FPR {:.4}% (expected {:.4}%, {:+.2}% off); false negatives {false_negatives}/{MEMBER_SAMPLE}; \
         fill {:.4}; estimated_len {estimated:.0} ({:+.3}%)",
        params.bits_per_key(N),
        params.k,
        100.0 * measured,
        100.0 * expected,
        100.0 * (measured - expected) / expected,
        filter.fill_ratio(),
        100.0 * (estimated - N as f64) / N as f64,
    );

    assert_eq!(false_negatives, 0, "an inserted key was reported absent");
    assert!(
        (measured - expected).abs() <= 0.10 * expected,
        "measured FPR {measured} is more than 10% from the expected {expected}"
    );
    assert!(measured <= 0.0096, "measured FPR {measured} above 0.96%");
    assert!((estimated - N as f64).abs() <= 0.01 * N as f64, "estimated_len {estimated} is more than 1% from {N}");
}
