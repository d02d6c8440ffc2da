//! A filter's stats (`GET /v1/filters/{filter}/stats`) and a rebuild's progress within them.

use serde::{Deserialize, Serialize};

/// A rebuild's progress, as the stats show it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RebuildProgress {
    /// The generation being built.
    pub generation: u64,
    /// `settling`, `scanning` or `uploading`.
    pub phase: String,
    /// Keys read so far.
    pub keys_scanned: u64,
    /// Keys the scan should find, if known.
    pub keys_expected: Option<u64>,
    /// Scan rate so far.
    pub keys_per_sec: f64,
    /// Seconds to the end of the scan, if known.
    pub eta_secs: Option<f64>,
    /// When it started, ms since the Unix epoch.
    pub started_ms: u64,
    /// When it last published, ms since the Unix epoch.
    pub updated_ms: u64,
}

/// A filter's state and health (`GET /v1/filters/{filter}/stats`). While the filter's bits are
/// lost and a rebuild runs, only `filter`, `building_generation` and `rebuild` are set.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct FilterStats {
    /// The filter.
    pub filter: String,
    /// How keys are written.
    #[serde(default)]
    pub key_format: Option<String>,
    /// Keys it is sized for.
    #[serde(default)]
    pub capacity: Option<u64>,
    /// Target false-positive rate at capacity.
    #[serde(default)]
    pub target_fp_rate: Option<f64>,
    /// The generation answering lookups; none while its bits are lost or being built.
    pub generation: Option<u64>,
    /// A generation being built, if any.
    #[serde(default)]
    pub building_generation: Option<u64>,
    /// Its progress, if published.
    #[serde(default)]
    pub rebuild: Option<RebuildProgress>,
    /// The generation replaced last, kept for edges a while.
    #[serde(default)]
    pub previous_generation: Option<u64>,
    /// Hash functions.
    #[serde(default)]
    pub k: Option<u32>,
    /// Segments the generation's bits are cut into.
    #[serde(default)]
    pub segment_count: Option<u32>,
    /// Bytes per segment.
    #[serde(default)]
    pub segment_bytes: Option<u64>,
    /// Bytes the bits take in the filter store.
    #[serde(default)]
    pub memory_bytes: Option<u64>,
    /// Bits set.
    #[serde(default)]
    pub bits_set: Option<u64>,
    /// Share of bits set.
    #[serde(default)]
    pub fill_ratio: Option<f64>,
    /// Keys the fill suggests.
    #[serde(default)]
    pub estimated_keys: Option<u64>,
    /// Expected false-positive rate once at capacity.
    #[serde(default)]
    pub expected_fp_rate_at_capacity: Option<f64>,
    /// Expected false-positive rate at the estimated keys.
    #[serde(default)]
    pub expected_fp_rate_now: Option<f64>,
    /// Lookups the filter answered "not seen" (this origin, since it started).
    #[serde(default)]
    pub lookups_answered_by_filter: Option<u64>,
    /// Lookups the filter answered "maybe".
    #[serde(default)]
    pub filter_maybes: Option<u64>,
    /// "Maybe"s the database answered "not stored".
    #[serde(default)]
    pub observed_false_positives: Option<u64>,
    /// Share of "maybe"s that were false positives (not a false-positive rate).
    #[serde(default)]
    pub false_positive_share_of_maybes: Option<f64>,
    /// Keys deleted since the generation was built (their bits stay set).
    #[serde(default)]
    pub deletes_since_build: Option<u64>,
    /// Entries in the generation's insert journal.
    #[serde(default)]
    pub journal_entries: Option<u64>,
    /// Bytes the journal takes, if the store can tell.
    #[serde(default)]
    pub journal_bytes: Option<u64>,
    /// False positives among lookups of absent keys: the rate to compare with the target.
    #[serde(default)]
    pub observed_fp_rate: Option<f64>,
    /// How origins answer "no" from their local copies of the generation answering lookups:
    /// `lease` (from memory while a copy's lease holds; writes wait) or `barrier` (after a
    /// Redis round trip; writes do not wait).
    #[serde(default)]
    pub read_consistency: Option<String>,
    /// L of that generation's read lease, ms (lease mode only).
    #[serde(default)]
    pub read_lease_ms: Option<f64>,
    /// Lookups this origin answered "no" from its local copy under the lease, without a Redis
    /// call (since it started).
    #[serde(default)]
    pub lookups_answered_under_lease: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_of_a_filter_being_rebuilt_after_a_loss_read_too() {
        let text = r#"{"filter":"f","generation":null,"building_generation":7,"rebuild":null}"#;
        let stats: FilterStats = serde_json::from_str(text).unwrap();
        assert_eq!((stats.generation, stats.building_generation, stats.k), (None, Some(7), None));
    }

    #[test]
    fn golden_stats_fields() {
        let stats = FilterStats { filter: "f".into(), generation: Some(3), k: Some(6), ..FilterStats::default() };
        let json = serde_json::to_value(&stats).unwrap();
        assert_eq!(json["filter"], "f");
        assert_eq!(json["generation"], 3);
        assert_eq!(json["k"], 6);
        assert!(json["capacity"].is_null(), "unset fields are written as null: {json}");
        assert_eq!(json.as_object().unwrap().len(), 28, "every field is written");
        assert_eq!(serde_json::from_value::<FilterStats>(json).unwrap(), stats);
    }
}
