//! Golden vectors: the bits of a fixed set of keys, committed in `golden.json` and checked both
//! natively and on wasm32, so the edge (wasm) and the origin (native) provably agree.
//!
//! # Running
//! Native: `cargo test -p bloomgate-filter --test golden`.
//! wasm32 under node: `CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUNNER=wasm-bindgen-test-runner
//! cargo test -p bloomgate-filter --target wasm32-unknown-unknown --test golden`
//! (`scripts/test` does both).
//! After an *intended* format change, rewrite the file with
//! `BG_BLESS_GOLDEN=1 cargo test -p bloomgate-filter --test golden` and say why in the
//! commit: every deployed filter's bits change with it.

use bloomgate_filter::block::probe_positions;
use bloomgate_filter::{encode_segment, hash_key, BloomFilter, KeyFormat, Params};
use serde::{Deserialize, Serialize};

#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct Golden {
    keys: Vec<KeyVector>,
    segments: Vec<SegmentVector>,
}

#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct KeyVector {
    params: Params,
    key_format: KeyFormat,
    key: String,
    normalized_hex: String,
    block_bits: u64,
    probe_bits: u64,
    block: u64,
    segment: u32,
    block_in_segment: u32,
    bit_positions: Vec<u16>,
}

#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct SegmentVector {
    params: Params,
    generation: u64,
    index: u32,
    version: u64,
    ones: u32,
    checksum: u64,
}

fn param_sets() -> Vec<Params> {
    vec![
        Params::new(0x626C_6F6F_6D67_6174, 6, 10, 4).unwrap(),
        Params::new(0, 1, 0, 1).unwrap(),
        Params::new(u64::MAX, 16, 3, 7).unwrap(),
        // 10^9 keys at 1 %: ~1.2 GB, block indices far beyond 32 bits (keys only, no segments).
        Params::for_capacity(1_000_000_000, 0.01).unwrap(),
    ]
}

fn keys() -> Vec<(KeyFormat, String)> {
    let sha256_empty = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
    vec![
        (KeyFormat::SHA256_HEX, sha256_empty.to_string()),
        (KeyFormat::SHA256_HEX, sha256_empty.to_uppercase()),
        (KeyFormat::Hex { digits: Some(32) }, "d41d8cd98f00b204e9800998ecf8427e".to_string()),
        (KeyFormat::Hex { digits: None }, "00".to_string()),
        (KeyFormat::Bytes, "a".to_string()),
        (KeyFormat::Bytes, "file/with spaces/and-ünïcode".to_string()),
        (KeyFormat::Bytes, "x".repeat(1024)),
    ]
}

fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn compute() -> Golden {
    let mut vectors = Vec::new();
    let mut segments = Vec::new();
    for params in param_sets() {
        let small = params.total_bytes() <= 1 << 20;
        let mut filter = small.then(|| BloomFilter::new(params));
        for (format, key) in keys() {
            let normalized = format.normalize(key.as_bytes()).unwrap();
            let hash = hash_key(&normalized, params.seed);
            let at = params.locate(&hash);
            let (positions, n) = probe_positions(hash.probe_bits, params.k);
            vectors.push(KeyVector {
                params,
                key_format: format,
                key,
                normalized_hex: to_hex(&normalized),
                block_bits: hash.block_bits,
                probe_bits: hash.probe_bits,
                block: at.block,
                segment: at.segment,
                block_in_segment: at.block_in_segment,
                bit_positions: positions[..n].to_vec(),
            });
            if let Some(f) = filter.as_mut() {
                f.insert(&normalized);
            }
        }
        if let Some(f) = filter {
            for index in 0..params.segment_count {
                let payload = f.segment_payload(index);
                let encoded = encode_segment(&params, 7, index, 9 + u64::from(index), &payload).unwrap();
                segments.push(SegmentVector {
                    params,
                    generation: 7,
                    index,
                    version: 9 + u64::from(index),
                    ones: payload.iter().map(|b| b.count_ones()).sum(),
                    checksum: u64::from_le_bytes(encoded[56..64].try_into().unwrap()),
                });
            }
        }
    }
    Golden { keys: vectors, segments }
}

const COMMITTED: &str = include_str!("golden.json");

#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
#[cfg_attr(not(target_arch = "wasm32"), test)]
fn this_target_computes_the_committed_vectors() {
    let computed = compute();
    #[cfg(not(target_arch = "wasm32"))]
    if std::env::var_os("BG_BLESS_GOLDEN").is_some() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden.json");
        std::fs::write(path, serde_json::to_string_pretty(&computed).unwrap() + "\n").unwrap();
        return;
    }
    let committed: Golden = serde_json::from_str(COMMITTED).expect("golden.json parses");
    assert_eq!(committed.keys.len(), computed.keys.len());
    for (want, got) in committed.keys.iter().zip(&computed.keys) {
        assert_eq!(want, got, "key vector differs on {}", std::env::consts::ARCH);
    }
    assert_eq!(committed.segments, computed.segments);
}

#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
#[cfg_attr(not(target_arch = "wasm32"), test)]
fn letter_case_does_not_change_the_bits() {
    let golden: Golden = serde_json::from_str(COMMITTED).unwrap();
    let lower = &golden.keys[0];
    let upper = &golden.keys[1];
    assert_eq!((lower.block, &lower.bit_positions), (upper.block, &upper.bit_positions));
    // Bit offsets past 2^32 are where 32-bit index math breaks (RedisBloom, Spark).
    assert!(
        golden.keys.iter().any(|v| v.block * 512 > u64::from(u32::MAX)),
        "a vector must exercise bit offsets beyond 32 bits"
    );
}
