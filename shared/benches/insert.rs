//! Inserts side by side with fastbloom 0.17, per key, into filters sized for 10^6 and 10^8 keys
//! at 10 bits per key, fixed seeds; at 10^8 also into our filter backed by transparent huge
//! pages.
//!
//! # Running
//! `cargo bench -p bloomgate-filter --bench insert` (about a minute; BENCHMARKS.md has the
//! figures).
//!
//! Each iteration inserts the next key of a pre-generated array of 2^22 32-byte pseudo-random
//! keys (128 MiB), so at 10^8 keys the writes land on lines that are not in cache. Both filters
//! are allocated once per size; their constructors write every byte, so no page faults are
//! timed.

use bloomgate_filter::params::best_k;
use bloomgate_filter::{BloomFilter, Params};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use std::hint::black_box;
use std::time::Duration;

/// Filter sizes, in keys.
const SIZES: [u64; 2] = [1_000_000, 100_000_000];
/// Bits per key for both filters.
const BITS_PER_KEY: u64 = 10;
/// Keys per insert array: a power of two, so cycling is a mask.
const KEYS: usize = 1 << 22;
/// Only sizes at or above this also get the huge-page filter (see `benches/lookup.rs`).
const HUGE_PAGES_FROM: u64 = 100_000_000;

const OUR_SEED: u64 = 0x6265_6e63_685f_7631;
const FASTBLOOM_SEED: u128 = 0x6661_7374_626c_6f6f_6d5f_7365_6564_3137;

/// splitmix64's finaliser: a bijection on u64.
fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// Key `i`: 32 pseudo-random bytes, distinct for distinct `i` (the first word is a bijection).
fn key(i: u64) -> [u8; 32] {
    let mut out = [0u8; 32];
    for (j, chunk) in out.chunks_exact_mut(8).enumerate() {
        let word = mix(i.wrapping_add((j as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)));
        chunk.copy_from_slice(&word.to_le_bytes());
    }
    out
}

/// The same sizing as `benches/lookup.rs`: 10 bits per key (one block more at 10^6), best k.
fn our_params(n: u64) -> Params {
    let blocks = (n * BITS_PER_KEY).div_ceil(512);
    Params::new(OUR_SEED, best_k(BITS_PER_KEY as f64), 0, blocks as u32).expect("valid params")
}

fn inserts(c: &mut Criterion) {
    let keys: Vec<[u8; 32]> = (0..KEYS as u64).map(key).collect();
    let mut group = c.benchmark_group("insert");
    group.throughput(Throughput::Elements(1));
    for n in SIZES {
        let params = our_params(n);
        let mut ours = BloomFilter::new(params);
        group.bench_function(BenchmarkId::new("ours", n), |b| {
            let mut i = 0usize;
            b.iter(|| {
                ours.insert(black_box(&keys[i]));
                i = (i + 1) & (KEYS - 1);
            })
        });
        drop(ours);
        if n >= HUGE_PAGES_FROM {
            let mut huge = BloomFilter::new_with_huge_pages(params);
            group.bench_function(BenchmarkId::new("ours_huge_pages", n), |b| {
                let mut i = 0usize;
                b.iter(|| {
                    huge.insert(black_box(&keys[i]));
                    i = (i + 1) & (KEYS - 1);
                })
            });
        }
        let mut fast = fastbloom::BloomFilter::with_num_bits(params.total_bits() as usize)
            .seed(&FASTBLOOM_SEED)
            .expected_items(n as usize);
        group.bench_function(BenchmarkId::new("fastbloom", n), |b| {
            let mut i = 0usize;
            b.iter(|| {
                let previously = fast.insert(black_box(&keys[i]));
                i = (i + 1) & (KEYS - 1);
                previously
            })
        });
    }
    group.finish();
}

fn config() -> Criterion {
    Criterion::default().warm_up_time(Duration::from_secs(2)).measurement_time(Duration::from_secs(5)).sample_size(50)
}

criterion_group! {
    name = benches;
    config = config();
    targets = inserts
}
criterion_main!(benches);
