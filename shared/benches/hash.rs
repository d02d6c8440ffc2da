//! The compute half of a lookup, without memory: our key hash (XXH3-128) and probe mask next to
//! fastbloom 0.17's source hash (SipHash-1-3 through `core::hash::Hash`), on 32-byte keys. Shows
//! how much of a lookup or insert is hashing once the filter itself is in cache.
//!
//! # Running
//! `cargo bench -p bloomgate-filter --bench hash` (about 30 seconds).

use bloomgate_filter::block::probe_mask;
use bloomgate_filter::hash_key;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use std::hint::black_box;
use std::time::Duration;

/// Keys per array: small enough to stay in L2, so only compute is timed.
const KEYS: usize = 1 << 12;
const OUR_SEED: u64 = 0x6265_6e63_685f_7631;
const FASTBLOOM_SEED: u128 = 0x6661_7374_626c_6f6f_6d5f_7365_6564_3137;

/// splitmix64's finaliser: a bijection on u64.
fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// Key `i`: 32 pseudo-random bytes.
fn key(i: u64) -> [u8; 32] {
    let mut out = [0u8; 32];
    for (j, chunk) in out.chunks_exact_mut(8).enumerate() {
        let word = mix(i.wrapping_add((j as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)));
        chunk.copy_from_slice(&word.to_le_bytes());
    }
    out
}

fn hashes(c: &mut Criterion) {
    let keys: Vec<[u8; 32]> = (0..KEYS as u64).map(key).collect();
    let fast = fastbloom::BloomFilter::with_num_bits(512).seed(&FASTBLOOM_SEED).hashes(7);
    let mut group = c.benchmark_group("hash");
    group.throughput(Throughput::Elements(1));
    group.bench_function("ours_xxh3_128", |b| {
        let mut i = 0usize;
        b.iter(|| {
            let h = hash_key(black_box(&keys[i]), OUR_SEED);
            i = (i + 1) & (KEYS - 1);
            h
        })
    });
    group.bench_function("ours_xxh3_128_and_probe_mask_k6", |b| {
        let mut i = 0usize;
        b.iter(|| {
            let h = hash_key(black_box(&keys[i]), OUR_SEED);
            i = (i + 1) & (KEYS - 1);
            probe_mask(h.probe_bits, 6)
        })
    });
    group.bench_function("fastbloom_siphash13", |b| {
        let mut i = 0usize;
        b.iter(|| {
            let h = fast.source_hash(black_box(&keys[i]));
            i = (i + 1) & (KEYS - 1);
            h
        })
    });
    group.finish();
}

fn config() -> Criterion {
    Criterion::default().warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(4)).sample_size(50)
}

criterion_group! {
    name = benches;
    config = config();
    targets = hashes
}
criterion_main!(benches);
