//! What the edge's own work costs per answer, natively (the Rust of the handler, without the
//! Workers runtime's calls into JavaScript around it): a "no" from a copy at hand, a key of a
//! batch, a segment verified on arrival (and a Cache API entry's MAC before it), a refresh's
//! journal chunk taken in and brought to every copy held, and a copy from the Cache API brought
//! forward from the tail.
//!
//! `cargo bench -p bloomgate-edge --bench answer`

use bloomgate_client::paths;
use bloomgate_edge::cache_entry::{self, EntryHeader, EntryKey};
use bloomgate_edge::copy::SegmentCopy;
use bloomgate_edge::store::{SegmentKey, SegmentStore};
use bloomgate_edge::{answer, cache_copy, decide, route};
use bloomgate_filter::{
    decode_journal, decode_path_key, encode_journal, encode_segment_at, hash_key, BloomFilter, JournalPosition,
    KeyFormat, KeyHash, Manifest, Params, Segment,
};
use criterion::{criterion_group, criterion_main, BatchSize, BenchmarkId, Criterion};
use std::hint::black_box;

const MIB: usize = 1024 * 1024;

fn at(added: u64) -> JournalPosition {
    JournalPosition { added, id_ms: 1_700_000_000_000 + added * 40, id_seq: 0 }
}

/// A 10^6-key filter at 1 % (64 KiB segments) holding 500,000 keys, its manifest under a
/// journal, and a store holding every segment.
struct Setup {
    manifest: Manifest,
    filter: BloomFilter,
    store: SegmentStore,
}

fn setup(capacity: u64, stored: u32) -> Setup {
    let params = Params::for_capacity(capacity, 0.01).expect("params");
    let mut filter = BloomFilter::new(params);
    for i in 0..stored {
        filter.insert(&key_bytes(i));
    }
    let manifest = Manifest {
        format: bloomgate_filter::MANIFEST_FORMAT,
        filter: "hashes".into(),
        key_format: KeyFormat::SHA256_HEX,
        generation: 1,
        params,
        segment_versions: Vec::new(),
        journal: Some(at(0)),
    };
    let mut store = SegmentStore::new(32 * MIB);
    for i in 0..params.segment_count.min(400) {
        store.keep(("hashes".into(), 1, i), copy(&filter, i, 0));
    }
    Setup { manifest, filter, store }
}

fn copy(filter: &BloomFilter, index: u32, position: u64) -> SegmentCopy {
    let bytes = encode_segment_at(filter.params(), 1, index, 1, at(position), &filter.segment_payload(index));
    SegmentCopy::new(Segment::decode(bytes.expect("encode")).expect("decode"))
}

fn key_bytes(i: u32) -> [u8; 32] {
    let mut k = [0u8; 32];
    k[..4].copy_from_slice(&i.to_le_bytes());
    k[4..8].copy_from_slice(&0x5eed_u32.to_le_bytes());
    k
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// One key's decision and answer as the handler makes them, from the path on.
fn answer_one(s: &mut Setup, path: &str) -> Option<Vec<u8>> {
    let route::Route::Lookup { filter, key } = route::classify("GET", path) else { return None };
    let text = decode_path_key(key).ok()?;
    let key = s.manifest.key_format.normalize(text.as_bytes()).ok()?;
    let index = decide::segment_of(&s.manifest, &key);
    let copy = s.store.get(&(s.manifest.filter.clone(), s.manifest.generation, index));
    let decision = decide::answer_now(decide::decide(&s.manifest, copy.as_ref(), &key), 0.0, 1.0, 2);
    (decision == decide::Decision::NotSeen).then(|| serde_json::to_vec(&answer::not_seen(filter, &text)).unwrap())
}

fn answers(c: &mut Criterion) {
    let mut s = setup(1_000_000, 500_000);
    let absent: Vec<String> = (0..4096u32).map(|i| paths::key("hashes", &hex(&key_bytes(9_000_000 + i)))).collect();
    let mut i = 0;
    c.bench_function("edge/no_from_a_copy_at_hand", |b| {
        b.iter(|| {
            i = (i + 1) % absent.len();
            black_box(answer_one(&mut s, &absent[i]))
        })
    });
    let keys: Vec<String> = (0..100u32).map(|i| hex(&key_bytes(8_000_000 + i))).collect();
    let mut group = c.benchmark_group("edge/batch");
    group.throughput(criterion::Throughput::Elements(keys.len() as u64));
    group.bench_function(BenchmarkId::new("keys", keys.len()), |b| {
        b.iter(|| {
            let mut no = 0;
            for k in &keys {
                let key = s.manifest.key_format.normalize(k.as_bytes()).expect("hex");
                let index = decide::segment_of(&s.manifest, &key);
                let copy = s.store.get(&(s.manifest.filter.clone(), 1, index));
                no += usize::from(decide::decide(&s.manifest, copy.as_ref(), &key) == decide::Decision::NotSeen);
            }
            black_box(no)
        })
    });
    group.finish();
}

fn arrivals(c: &mut Criterion) {
    let s = setup(1_000_000, 500_000);
    let bytes = copy(&s.filter, 3, 0).segment().as_bytes().to_vec();
    c.bench_function("edge/segment_decode_64KiB", |b| {
        b.iter_batched(|| bytes.clone(), |bytes| black_box(Segment::decode(bytes)), BatchSize::SmallInput)
    });
    // A segment from the Cache API has its entry's MAC verified before it is decoded.
    let key = EntryKey::derive("bench-edge-secret");
    let url = cache_copy::segment_cache_url(&s.manifest, 3, 0);
    let header = cache_entry::seal(&key, &url, &bytes);
    let read = EntryHeader::read(&header, header.len() + bytes.len(), bytes.len()).expect("a sealed entry");
    c.bench_function("edge/cache_entry_verify_64KiB", |b| b.iter(|| black_box(read.verify(&key, &url, &bytes))));
}

/// A chunk of `adds` single-key adds after `from`.
fn chunk(params: &Params, from: u64, adds: u64) -> Vec<u8> {
    let entries: Vec<Vec<KeyHash>> =
        (0..adds).map(|e| vec![hash_key(&key_bytes(20_000_000 + (from + e) as u32), params.seed)]).collect();
    encode_journal(1, params.seed, from, at(from + adds), &entries)
}

fn catch_ups(c: &mut Criterion) {
    // A refresh at 25 (and 250) writes a second: the entries of one second into the tail, every
    // copy held (the filter's 18 segments) brought forward.
    let s = setup(1_000_000, 500_000);
    let params = s.manifest.params;
    let copies: Vec<(SegmentKey, SegmentCopy)> = s.store.copies_of("hashes", 1);
    let mut group = c.benchmark_group("edge/catch_up");
    for adds in [25u64, 250] {
        let bytes = chunk(&params, 0, adds);
        group.bench_function(BenchmarkId::new("refresh_adds", adds), |b| {
            b.iter_batched(
                || {
                    let mut store = SegmentStore::new(32 * MIB);
                    for (key, copy) in &copies {
                        store.keep(key.clone(), copy.clone());
                    }
                    store
                },
                |mut store| {
                    let view = decode_journal(&bytes).expect("chunk");
                    store.tail_mut("hashes", 1, params, at(0)).add(&view).expect("joins");
                    black_box(store.bring_all_forward("hashes", 1))
                },
                BatchSize::SmallInput,
            )
        });
    }
    // A copy from the Cache API a minute behind, in a filter of 2,100 segments (a filter four
    // times a 32 MiB budget) written at 25 keys a second: its own segment's hashes only.
    let mut s = setup(115_000_000, 0);
    let params = s.manifest.params;
    let bytes = chunk(&params, 0, 1_500);
    s.store.tail_mut("hashes", 1, params, at(0)).add(&decode_journal(&bytes).expect("chunk")).expect("joins");
    let key: SegmentKey = ("hashes".into(), 1, 1_000);
    let old = copy(&s.filter, 1_000, 0);
    group.bench_function("cache_copy_a_minute_behind", |b| {
        b.iter(|| {
            s.store.remove(&key);
            s.store.keep(key.clone(), old.clone());
            black_box(s.store.bring_forward(&key))
        })
    });
    group.finish();
}

criterion_group!(benches, answers, arrivals, catch_ups);
criterion_main!(benches);
