//! Why a single lookup at 10^8 keys costs a whole memory latency: how much work between two
//! independent lookups still lets the CPU overlap their cache misses. Each variant walks 2^22
//! keys over a 125 MB array of 64-byte blocks (the size of a 10^8-key filter at 10 bits per key),
//! doing more or less of our lookup's compute before the load; the last one chains each lookup
//! on the previous answer, so nothing overlaps and it measures plain latency.
//!
//! # Running
//! `cargo bench -p bloomgate-filter --bench overlap` (about a minute). BENCHMARKS.md discusses
//! the figures.

#[macro_use]
mod common;

use bloomgate_filter::block::probe_mask;
use bloomgate_filter::{hash_key, BloomFilter, KeyHash, Params};
use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, Criterion, Throughput};
use std::hint::black_box;

/// Blocks of a 10^8-key filter at 10 bits per key.
const BLOCKS: u64 = 1_953_125;
const KEYS: usize = 1 << 22;
const SEED: u64 = 1;

/// A cache-line-aligned block, like the filter's.
#[repr(C, align(64))]
#[derive(Clone, Copy, Default)]
struct Block([u64; 8]);

fn block_of(x: u64) -> usize {
    ((u128::from(x) * u128::from(BLOCKS)) >> 64) as usize
}

/// Our test: every bit of the mask set.
fn contains(words: &[u64; 8], mask: &[u64; 8]) -> bool {
    (0..8).fold(0u64, |missing, i| missing | (mask[i] & !words[i])) == 0
}

/// A cheap stand-in for `probe_mask`: six 9-bit fields of `x`, no distinctness loop.
fn contains_cheap(words: &[u64; 8], mut x: u64) -> bool {
    let mut missing = 0u64;
    for _ in 0..6 {
        let p = (x & 511) as usize;
        missing |= !words[p >> 6] & (1 << (p & 63));
        x >>= 9;
    }
    missing == 0
}

/// One lookup per iteration through `lookup`, generic so it inlines like a real call site.
fn variant<F: Fn(usize) -> bool>(group: &mut BenchmarkGroup<'_, WallTime>, name: &str, lookup: F) {
    group.bench_function(name, |b| {
        let mut i = 0usize;
        b.iter(|| {
            let answer = lookup(i);
            i = (i + 1) & (KEYS - 1);
            answer
        })
    });
}

fn overlap(c: &mut Criterion) {
    // Every byte written, so no page faults are timed.
    let mut blocks = vec![Block::default(); BLOCKS as usize];
    blocks.iter_mut().for_each(|b| b.0[0] = 1);
    let blocks = &blocks;
    let keys = common::keys(KEYS);
    let keys = &keys;
    let hashes: Vec<KeyHash> = keys.iter().map(|k| hash_key(k, SEED)).collect();
    let hashes = &hashes;

    let mut owned = c.benchmark_group("overlap");
    owned.throughput(Throughput::Elements(1));
    let group = &mut owned;
    variant(group, "1_precomputed_hash_load_only", |i| {
        let h = hashes[i];
        contains_cheap(&blocks[block_of(h.block_bits)].0, 0)
    });
    variant(group, "2_precomputed_hash_probe_mask", |i| {
        let h = hashes[i];
        contains(&blocks[block_of(h.block_bits)].0, &probe_mask(h.probe_bits, 6))
    });
    variant(group, "3_xxh3_128_cheap_mask", |i| {
        let h = hash_key(black_box(&keys[i]), SEED);
        contains_cheap(&blocks[block_of(h.block_bits)].0, h.probe_bits)
    });
    variant(group, "4_xxh3_128_probe_mask_like_ours", |i| {
        let h = hash_key(black_box(&keys[i]), SEED);
        contains(&blocks[block_of(h.block_bits)].0, &probe_mask(h.probe_bits, 6))
    });
    variant(group, "5_xxh3_64_cheap_mask", |i| {
        let h = xxhash_rust::xxh3::xxh3_64_with_seed(black_box(&keys[i]), SEED);
        contains_cheap(&blocks[block_of(h)].0, h.rotate_left(32))
    });
    // The real thing, on empty filters of the same size: a miss costs the same whether or not
    // the block has bits set (the test is branch-free).
    let params = Params::new(SEED, 6, 0, BLOCKS as u32).expect("valid params");
    let plain = BloomFilter::new_on_ordinary_pages(params);
    variant(group, "7_bloomfilter_may_contain", |i| plain.may_contain(black_box(&keys[i])));
    drop(plain);
    let huge = BloomFilter::new_with_huge_pages(params);
    variant(group, "8_bloomfilter_may_contain_huge_pages", |i| huge.may_contain(black_box(&keys[i])));
    drop(huge);
    group.bench_function("6_like_ours_dependent_chain", |b| {
        let mut i = 0usize;
        b.iter(|| {
            let h = hash_key(&keys[i], SEED);
            let answer = contains(&blocks[block_of(h.block_bits)].0, &probe_mask(h.probe_bits, 6));
            // The next key depends on this answer: no two lookups overlap.
            i = (i + 1 + usize::from(answer)) & (KEYS - 1);
            answer
        })
    });
    owned.finish();
}

bench_main!(overlap, warm_up = 1, measure = 4);
