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

#[macro_use]
mod common;

use bloomgate_filter::BloomFilter;
use common::{our_params, FASTBLOOM_SEED};
use criterion::{BenchmarkId, Criterion, Throughput};
use std::hint::black_box;

/// Filter sizes, in keys.
const SIZES: [u64; 2] = [1_000_000, 100_000_000];
/// Keys per insert array: a power of two, so cycling is a mask.
const KEYS: usize = 1 << 22;
/// Only sizes at or above this also get the huge-page filter (see `benches/lookup.rs`).
const HUGE_PAGES_FROM: u64 = 100_000_000;

fn inserts(c: &mut Criterion) {
    let keys = common::keys(KEYS);
    let mut group = c.benchmark_group("insert");
    group.throughput(Throughput::Elements(1));
    for n in SIZES {
        let params = our_params(n);
        let mut ours = BloomFilter::new_on_ordinary_pages(params);
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

bench_main!(inserts, warm_up = 2, measure = 5);
