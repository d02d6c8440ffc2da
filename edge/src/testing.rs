//! What the native tests of several modules build alike: small filter params, journal
//! positions and manifests.

use bloomgate_filter::{JournalPosition, KeyFormat, Manifest, Params, SizingOptions};

/// Params of a 5,000-key filter at 1 % in 1 KiB segments, hashed with `seed`.
pub(crate) fn params(seed: u64) -> Params {
    Params::for_capacity_with(5_000, 0.01, SizingOptions { seed, segment_bytes: 1024 }).unwrap()
}

/// The journal position after `added` entries.
pub(crate) fn at(added: u64) -> JournalPosition {
    JournalPosition { added, id_ms: 1_700_000_000_000 + added, id_seq: 1 }
}

/// Generation 9 of filter `f` with `params`, every segment at `version`, naming `journal`.
pub(crate) fn manifest(params: Params, version: u64, journal: Option<JournalPosition>) -> Manifest {
    Manifest {
        format: bloomgate_filter::MANIFEST_FORMAT,
        filter: "f".into(),
        key_format: KeyFormat::Bytes,
        generation: 9,
        params,
        segment_versions: vec![version; params.segment_count as usize],
        journal,
    }
}
