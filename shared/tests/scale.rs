//! The false-positive guarantee at production scale: 10^8 keys at exactly 10 bits per key.
//!
//! # Running
//! `cargo test --release -p bloomgate-filter --test scale -- --ignored --nocapture`
//! (`#[ignore]`d by default: it allocates 125 MB and takes about a minute in release, far more
//! in debug). It prints the measured figures; BENCHMARKS.md records them.

/// The benches' key generator (see its module doc), so the scale test and the lookup bench
/// measure the same keys.
#[path = "../benches/common/mod.rs"]
mod common;

use bloomgate_filter::params::best_k;
use bloomgate_filter::{BloomFilter, Params};
use common::{key, INSERTED, MISSES};
use std::time::Instant;

/// Keys inserted.
const N: u64 = 100_000_000;
/// Keys probed that were never inserted.
const MISS_PROBES: u64 = 10_000_000;
/// Inserted keys checked for false negatives (every `N / MEMBER_SAMPLE`-th one).
const MEMBER_SAMPLE: u64 = 1_000_000;
const THREADS: u64 = 2;

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
