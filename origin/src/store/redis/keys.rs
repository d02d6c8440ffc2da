//! The names of the store's keys in Redis (see the table in the module doc of `redis`), and how
//! the values some of them hold are read. Hash tags keep a segment's bits and version in one
//! Cluster slot, and a filter's metadata and journals in another.

pub(super) fn meta_key(filter: &str) -> String {
    format!("bg:{{{filter}}}:meta")
}

pub(super) fn lease_key(filter: &str) -> String {
    format!("bg:{{{filter}}}:lease")
}

pub(super) fn progress_key(filter: &str) -> String {
    format!("bg:{{{filter}}}:progress")
}

pub(super) fn deletes_key(filter: &str, generation: u64) -> String {
    format!("bg:{{{filter}}}:deletes:{generation}")
}

/// A rebuild's board of runs for `generation` (see `store::run_board`).
pub(super) fn runs_key(filter: &str, generation: u64) -> String {
    format!("bg:{{{filter}}}:runs:{generation}")
}

/// A builder's claim on run `index` of `generation`'s rebuild.
pub(super) fn run_claim_key(filter: &str, generation: u64, index: u32) -> String {
    format!("bg:{{{filter}}}:run:{generation}:{index}")
}

/// Where adds record that Redis's clock stepped back behind `generation`'s journal: the span
/// of ids given ahead of the clock (see `scripts/add.lua`), in the journal's slot.
pub(super) fn clock_steps_key(filter: &str, generation: u64) -> String {
    format!("bg:{{{filter}}}:jstep:{generation}")
}

pub(super) fn journal_key(filter: &str, generation: u64) -> String {
    format!("bg:{{{filter}}}:jnl:{generation}")
}

/// A stream id `ms-seq` as a journal position's id parts.
pub(super) fn parse_stream_id(id: &str) -> Option<(u64, u64)> {
    let (ms, seq) = id.split_once('-')?;
    Some((ms.parse().ok()?, seq.parse().ok()?))
}

pub(super) fn upload_key(filter: &str, generation: u64, index: u32) -> String {
    format!("bg:{{{filter}:{generation}:{index}}}:upload")
}

pub(super) fn segment_keys(filter: &str, generation: u64, index: u32) -> (String, String) {
    let tag = format!("bg:{{{filter}:{generation}:{index}}}");
    (format!("{tag}:bits"), format!("{tag}:ver"))
}

/// The generation a key of `filter` belongs to: segment keys `bg:{f:<gen>:<i>}:…` and delete
/// counts `bg:{f}:deletes:<gen>`, journals, a rebuild's run board and claims; None for the
/// filter's other keys.
pub(super) fn generation_of_key(filter: &str, key: &str) -> Option<u64> {
    for kind in ["deletes", "jnl", "jstep", "runs", "run"] {
        if let Some(rest) = key.strip_prefix(&format!("bg:{{{filter}}}:{kind}:")) {
            return rest.split(':').next()?.parse().ok();
        }
    }
    let rest = key.strip_prefix(&format!("bg:{{{filter}:"))?;
    rest.split(':').next()?.parse().ok()
}

/// A version as stored: a number, or anything else (missing, `retired`) = no usable segment.
pub(super) fn parse_version(value: Option<String>) -> Option<u64> {
    value?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_segments_bits_and_version_share_a_cluster_slot_and_segments_differ() {
        let (bits, ver) = segment_keys("hashes", 3, 17);
        assert_eq!(bits, "bg:{hashes:3:17}:bits");
        assert_eq!(ver, "bg:{hashes:3:17}:ver");
        assert_ne!(segment_keys("hashes", 3, 18).0, bits);
        assert_eq!(meta_key("hashes"), "bg:{hashes}:meta");
    }

    #[test]
    fn keys_name_their_generation() {
        assert_eq!(generation_of_key("f", "bg:{f:1700000000000:3}:bits"), Some(1_700_000_000_000));
        assert_eq!(generation_of_key("f", "bg:{f:17:3}:ver"), Some(17));
        assert_eq!(generation_of_key("f", "bg:{f}:deletes:17"), Some(17));
        assert_eq!(generation_of_key("f", "bg:{f}:meta"), None);
        assert_eq!(generation_of_key("f", &runs_key("f", 17)), Some(17));
        assert_eq!(generation_of_key("f", &clock_steps_key("f", 17)), Some(17));
        assert_eq!(generation_of_key("f", &run_claim_key("f", 17, 4)), Some(17));
        assert_eq!(generation_of_key("f", "bg:{f-2:17:3}:bits"), None, "another filter");
    }

    #[test]
    fn only_numbers_are_versions() {
        assert_eq!(parse_version(Some("12".into())), Some(12));
        assert_eq!(parse_version(Some("retired".into())), None);
        assert_eq!(parse_version(None), None);
    }
}
