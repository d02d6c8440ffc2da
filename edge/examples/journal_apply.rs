//! What bringing held segments forward costs, natively: a chunk of single-key adds taken into
//! the isolate's journal tail and every segment of a filter (64 KiB segments) brought up to its
//! end, re-encoding the ones it touches.
//!
//! `cargo run --release -p bloomgate-edge --example journal_apply`

use bloomgate_edge::copy::SegmentCopy;
use bloomgate_edge::store::SegmentStore;
use bloomgate_filter::{
    decode_journal, encode_journal, encode_segment_at, hash_key, BloomFilter, JournalPosition, KeyHash, Params, Segment,
};
use std::time::Instant;

fn main() {
    let params = Params::for_capacity(1_000_000, 0.01).expect("params");
    let mut filter = BloomFilter::new(params);
    for i in 0u32..500_000 {
        filter.insert(&i.to_le_bytes());
    }
    let at = |added: u64| JournalPosition { added, id_ms: 1_700_000_000_000 + added, id_seq: 0 };
    let encoded: Vec<Vec<u8>> = (0..params.segment_count)
        .map(|i| encode_segment_at(&params, 1, i, 1, at(0), &filter.segment_payload(i)).expect("encode"))
        .collect();
    println!("{} segments of {} bytes", params.segment_count, params.segment_bytes());
    for adds in [1u64, 10, 100, 1_000, 16_384] {
        let entries: Vec<Vec<KeyHash>> =
            (0..adds).map(|e| vec![hash_key(&(1_000_000 + e as u32).to_le_bytes(), params.seed)]).collect();
        let bytes = encode_journal(1, params.seed, 0, at(adds), &entries);
        let rounds = 20;
        let mut spent = std::time::Duration::ZERO;
        let mut re_encoded = 0;
        for _ in 0..rounds {
            let mut store = SegmentStore::new(64 << 20);
            for (i, segment) in encoded.iter().enumerate() {
                let copy = SegmentCopy::new(Segment::decode(segment.clone()).expect("decode"));
                store.keep(("f".into(), 1, i as u32), copy);
            }
            let before: Vec<SegmentCopy> = store.copies_of("f", 1).into_iter().map(|(_, c)| c).collect();
            let started = Instant::now();
            let chunk = decode_journal(&bytes).expect("chunk");
            store.tail_mut("f", 1, params, at(0)).add(&chunk).expect("joins");
            store.bring_all_forward("f", 1);
            spent += started.elapsed();
            let after = store.copies_of("f", 1);
            re_encoded += after.iter().filter(|(_, c)| !before.iter().any(|b| b.shares_bytes_with(c))).count();
        }
        println!(
            "{adds:>6} adds ({:>7} bytes): {:>4} of {} segments re-encoded, {:?} for all of them",
            bytes.len(),
            re_encoded / rounds,
            params.segment_count,
            spent / rounds as u32
        );
    }
}
