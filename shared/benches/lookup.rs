//! Lookups side by side with fastbloom 0.17: single miss, single hit, and batched miss
//! (`may_contain_many`), at 10^6 and 10^8 keys, 10 bits per key, fixed seeds. "ours" is built
//! with `BloomFilter::new_on_ordinary_pages`, so it is on 4 KiB pages like fastbloom's array
//! (`new` would advise huge pages at 10^8); at 10^8 it is also compared with one backed by
//! transparent huge pages. `AnonHugePages` is printed after each is built, to show which pages
//! each really got. Before the timings of each size, the false-positive rate of both filters is
//! measured with 10^7 miss probes and printed to stderr.
//!
//! # Running
//! `cargo bench -p bloomgate-filter --bench lookup` (about 5 minutes; BENCHMARKS.md has the
//! figures). Add `-- --quick` for a smoke run.
//!
//! Keys are 32 pseudo-random bytes, like SHA-256 digests. Lookups walk a pre-generated array of
//! 2^22 keys (128 MiB), so at 10^8 keys each lookup misses the caches instead of re-reading the
//! few lines a short key list would keep hot.

#[macro_use]
mod common;

use bloomgate_filter::BloomFilter;
use common::{key, our_params, FASTBLOOM_SEED, INSERTED, MISSES};
use criterion::{BenchmarkId, Criterion, Throughput};
use std::hint::black_box;
use std::time::Instant;

/// Filter sizes, in keys.
const SIZES: [u64; 2] = [1_000_000, 100_000_000];
/// Keys per lookup array: a power of two, so cycling is a mask.
const KEYS: usize = 1 << 22;
/// Keys per `may_contain_many` call.
const BATCH: usize = 1024;
/// Miss probes for the false-positive measurement.
const FPR_PROBES: u64 = 10_000_000;
/// Only sizes at or above this also get the huge-page filter (it matters once the bit array
/// outgrows the TLB's reach; at 10^6 keys it is 1.2 MB).
const HUGE_PAGES_FROM: u64 = 100_000_000;

/// A third stream of keys never inserted (see `common::key`), for the false-positive rate.
const FPR_MISSES: u64 = 3;

/// The same number of bits; `expected_items(n)` lets fastbloom pick its own best k for that
/// many bits and keys (round(ln 2 · 10) = 7).
fn fastbloom_filter(n: u64, bits: u64) -> fastbloom::BloomFilter {
    fastbloom::BloomFilter::with_num_bits(bits as usize).seed(&FASTBLOOM_SEED).expected_items(n as usize)
}

fn key_array(stream: u64, modulo: u64) -> Vec<[u8; 32]> {
    (0..KEYS as u64).map(|i| key(stream, i % modulo)).collect()
}

/// Huge pages backing this process's anonymous memory, from /proc (Linux), in kB.
fn anon_huge_kb() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/smaps_rollup").ok()?;
    let line = text.lines().find(|l| l.starts_with("AnonHugePages:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

struct Filters {
    n: u64,
    ours: BloomFilter,
    ours_huge: Option<BloomFilter>,
    fast: fastbloom::BloomFilter,
}

impl Filters {
    fn build(n: u64) -> Filters {
        let params = our_params(n);
        let started = Instant::now();
        let mut ours = BloomFilter::new_on_ordinary_pages(params);
        for i in 0..n {
            ours.insert(&key(INSERTED, i));
        }
        let ours_took = started.elapsed();
        // The headline figure is for 4 KiB pages: show that no huge page backs this filter.
        eprintln!("n={n}: ordinary-page filter: AnonHugePages {:?} kB", anon_huge_kb());
        let ours_huge = (n >= HUGE_PAGES_FROM).then(|| {
            let before = anon_huge_kb();
            let mut huge = BloomFilter::new_with_huge_pages(params);
            // Copy the bits rather than insert 10^8 keys again: same bits, a fraction of the time.
            for s in 0..params.segment_count {
                huge.merge_segment_payload(s, &ours.segment_payload(s));
            }
            eprintln!("n={n}: huge-page filter: AnonHugePages {before:?} kB -> {:?} kB", anon_huge_kb());
            huge
        });
        let started = Instant::now();
        let mut fast = fastbloom_filter(n, params.total_bits());
        for i in 0..n {
            fast.insert(&key(INSERTED, i));
        }
        eprintln!(
            "n={n}: ours {} bits ({:.4}/key, k={}), built in {ours_took:.1?}; fastbloom {} bits, \
             k={}, built in {:.1?}",
            params.total_bits(),
            params.bits_per_key(n),
            params.k,
            fast.num_bits(),
            fast.num_hashes(),
            started.elapsed(),
        );
        Filters { n, ours, ours_huge, fast }
    }

    /// Measured false-positive rates over `FPR_PROBES` keys never inserted, next to the
    /// expected ones, printed to stderr.
    fn report_fpr(&self) {
        let n = self.n;
        let (mut ours_fp, mut fast_fp) = (0u64, 0u64);
        for i in 0..FPR_PROBES {
            let k = key(FPR_MISSES, i);
            ours_fp += u64::from(self.ours.may_contain(&k));
            fast_fp += u64::from(self.fast.contains(&k));
        }
        let rate = |fp: u64| fp as f64 / FPR_PROBES as f64;
        eprintln!(
            "n={n}: FPR over {FPR_PROBES} misses: ours {:.4}% (expected {:.4}%, fill {:.4}, \
             estimated_len {:.0}); fastbloom {:.4}% (expected {:.4}%)",
            100.0 * rate(ours_fp),
            100.0 * self.ours.params().expected_fp_rate(n),
            self.ours.fill_ratio(),
            self.ours.estimated_len(),
            100.0 * rate(fast_fp),
            100.0 * self.fast.expected_false_pos(n as usize),
        );
    }
}

/// One lookup per iteration, cycling through `keys`.
fn single<F: Fn(&[u8; 32]) -> bool>(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    id: BenchmarkId,
    keys: &[[u8; 32]],
    lookup: F,
) {
    group.bench_function(id, |b| {
        let mut i = 0usize;
        b.iter(|| {
            let k = &keys[i];
            i = (i + 1) & (KEYS - 1);
            lookup(black_box(k))
        })
    });
}

/// `BATCH` lookups per iteration, cycling through `keys` a batch at a time.
fn batched<F: Fn(&[[u8; 32]], &mut [bool])>(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    id: BenchmarkId,
    keys: &[[u8; 32]],
    lookup: F,
) {
    group.bench_function(id, |b| {
        let mut out = vec![false; BATCH];
        let mut at = 0usize;
        b.iter(|| {
            lookup(black_box(&keys[at..at + BATCH]), &mut out);
            at = (at + BATCH) & (KEYS - 1);
            black_box(&out);
        })
    });
}

fn lookups(c: &mut Criterion) {
    for n in SIZES {
        let filters = Filters::build(n);
        filters.report_fpr();
        let misses = key_array(MISSES, u64::MAX);
        let hits = key_array(INSERTED, n);
        let f = &filters;

        let mut group = c.benchmark_group("miss");
        group.throughput(Throughput::Elements(1));
        single(&mut group, BenchmarkId::new("ours", n), &misses, |k| f.ours.may_contain(k));
        if let Some(huge) = &f.ours_huge {
            single(&mut group, BenchmarkId::new("ours_huge_pages", n), &misses, |k| huge.may_contain(k));
        }
        single(&mut group, BenchmarkId::new("fastbloom", n), &misses, |k| f.fast.contains(k));
        group.finish();

        let mut group = c.benchmark_group("hit");
        group.throughput(Throughput::Elements(1));
        single(&mut group, BenchmarkId::new("ours", n), &hits, |k| f.ours.may_contain(k));
        single(&mut group, BenchmarkId::new("fastbloom", n), &hits, |k| f.fast.contains(k));
        group.finish();

        // Per-key figures come from `Throughput::Elements`: criterion prints elements/s, and
        // BENCHMARKS.md divides the median time per iteration by BATCH.
        let mut group = c.benchmark_group("miss_batch");
        group.throughput(Throughput::Elements(BATCH as u64));
        batched(&mut group, BenchmarkId::new("ours_many", n), &misses, |keys, out| f.ours.may_contain_many(keys, out));
        if let Some(huge) = &f.ours_huge {
            batched(&mut group, BenchmarkId::new("ours_many_huge_pages", n), &misses, |keys, out| {
                huge.may_contain_many(keys, out)
            });
        }
        // The same 1024 keys looked up one by one: the per-key baseline measured in this group.
        batched(&mut group, BenchmarkId::new("ours_single_loop", n), &misses, |keys, out| {
            for (o, k) in out.iter_mut().zip(keys) {
                *o = f.ours.may_contain(k);
            }
        });
        batched(&mut group, BenchmarkId::new("fastbloom_single_loop", n), &misses, |keys, out| {
            for (o, k) in out.iter_mut().zip(keys) {
                *o = f.fast.contains(k);
            }
        });
        group.finish();
    }
}

bench_main!(lookups, warm_up = 2, measure = 5);
