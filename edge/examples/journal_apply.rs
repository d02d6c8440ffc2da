//! What bringing a held segment forward costs, natively: a chunk of single-key adds applied to
//! every segment of a filter (64 KiB segments), re-encoding the ones it touches.
//!
//! `cargo run --release -p bloomgate-edge --example journal_apply`

use bloomgate_edge::held::{Applied, Held, Touched};
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
    let held: Vec<Held> = (0..params.segment_count)
        .map(|i| {
            let bytes = encode_segment_at(&params, 1, i, 1, at(0), &filter.segment_payload(i)).expect("encode");
            Held::new(Segment::decode(bytes).expect("decode"))
        })
        .collect();
    println!("{} segments of {} bytes", params.segment_count, params.segment_bytes());
    for adds in [1u64, 10, 100, 1_000, 16_384] {
        let entries: Vec<Vec<KeyHash>> =
            (0..adds).map(|e| vec![hash_key(&(1_000_000 + e as u32).to_le_bytes(), params.seed)]).collect();
        let bytes = encode_journal(1, params.seed, 0, at(adds), &entries);
        let rounds = 20;
        let started = Instant::now();
        let mut re_encoded = 0;
        for _ in 0..rounds {
            let chunk = decode_journal(&bytes).expect("chunk");
            let touched = Touched::of(&chunk, &params);
            for h in &held {
                if let Applied::Forward(next) = h.apply(&chunk, &touched) {
                    re_encoded += usize::from(!std::ptr::eq(next.segment(), h.segment()));
                }
            }
        }
        let per_round = started.elapsed() / rounds;
        println!(
            "{adds:>6} adds ({:>7} bytes): {:>4} of {} segments re-encoded, {per_round:?} for all of them",
            bytes.len(),
            re_encoded / rounds as usize,
            params.segment_count
        );
    }
}
