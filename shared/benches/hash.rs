//! The compute half of a lookup, without memory: our key hash (XXH3-128) and probe mask next to
//! fastbloom 0.17's source hash (SipHash-1-3 through `core::hash::Hash`), on 32-byte keys. Shows
//! how much of a lookup or insert is hashing once the filter itself is in cache.
//!
//! # Running
//! `cargo bench -p bloomgate-filter --bench hash` (about 30 seconds).

#[macro_use]
mod common;

use bloomgate_filter::block::probe_mask;
use bloomgate_filter::hash_key;
use common::{FASTBLOOM_SEED, OUR_SEED};
use criterion::{Criterion, Throughput};
use std::hint::black_box;

/// Keys per array: small enough to stay in L2, so only compute is timed.
const KEYS: usize = 1 << 12;

fn hashes(c: &mut Criterion) {
    let keys = common::keys(KEYS);
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

bench_main!(hashes, warm_up = 1, measure = 4);
