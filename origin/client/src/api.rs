//! The API's bodies: what a request sends and what each answer holds. The origin serializes
//! these very types, so a client and the server cannot disagree on a field's name.

use bloomgate_filter::KeyFormat;
use serde::{Deserialize, Serialize};

/// Who answered a lookup.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum AnsweredBy {
    /// The filter: "not seen", without the database.
    Filter,
    /// The database: after the filter's "maybe", or when the filter could not answer.
    Database,
}

impl AnsweredBy {
    /// As the API writes it (also the `x-bloomgate-answered-by` header's value).
    pub fn as_str(self) -> &'static str {
        match self {
            AnsweredBy::Filter => "filter",
            AnsweredBy::Database => "database",
        }
    }
}

/// A stored value: text when it is UTF-8, else base64.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum StoredValue {
    /// The value as text.
    Text(String),
    /// A value that is not UTF-8.
    Binary {
        /// Its bytes, base64 (standard alphabet, padded).
        base64: String,
    },
}

/// The answer for one key (`GET /v1/filters/{filter}/keys/{key}`: 200 if seen, 404 if not).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct KeyAnswer {
    /// The filter.
    pub filter: String,
    /// The key, as asked.
    pub key: String,
    /// Whether the key is stored. `false` is certain.
    pub seen: bool,
    /// Who answered.
    pub answered_by: AnsweredBy,
    /// The stored value, if the key is stored with a non-empty one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<StoredValue>,
}

/// Keys of a batch (`POST /v1/filters/{filter}/lookups` and `/keys`): at most `max_batch`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Keys {
    /// The keys, in the filter's key format.
    pub keys: Vec<String>,
}

/// The answers of a batch lookup, in the order of the keys asked.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Lookups {
    /// The filter.
    pub filter: String,
    /// One answer per key.
    pub results: Vec<KeyAnswer>,
}

/// A key stored (`PUT /v1/filters/{filter}/keys/{key}`, 201).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct KeyStored {
    /// The filter.
    pub filter: String,
    /// The key.
    pub key: String,
    /// Always true: a key not stored is an error answer.
    pub stored: bool,
}

/// A batch stored (`POST /v1/filters/{filter}/keys`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct KeysStored {
    /// The filter.
    pub filter: String,
    /// Keys stored: all of the batch.
    pub stored: usize,
}

/// A key deleted (`DELETE /v1/filters/{filter}/keys/{key}`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct KeyDeleted {
    /// The filter.
    pub filter: String,
    /// The key.
    pub key: String,
    /// Whether it was stored before.
    pub deleted: bool,
}

/// A filter to create (`PUT /v1/filters/{filter}`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CreateFilter {
    /// Keys the filter is sized for.
    pub capacity: u64,
    /// Target false-positive rate at capacity, in (0, 1).
    pub fp_rate: f64,
    /// How keys are written: `hex:64` (default), `hex`, `hex:N`, `md5`, `sha1`, `sha256`, `bytes`.
    #[serde(default = "default_key_format")]
    #[cfg_attr(feature = "openapi", schema(value_type = String, example = "hex:64"))]
    pub key_format: KeyFormat,
    /// Bytes per segment, a power of two (default 65536).
    #[serde(default = "default_segment_bytes")]
    pub segment_bytes: u64,
}

fn default_key_format() -> KeyFormat {
    KeyFormat::SHA256_HEX
}

fn default_segment_bytes() -> u64 {
    bloomgate_filter::params::DEFAULT_SEGMENT_BYTES
}

impl CreateFilter {
    /// A filter of `capacity` keys at `fp_rate`, with the default key format and segments.
    pub fn new(capacity: u64, fp_rate: f64) -> CreateFilter {
        CreateFilter { capacity, fp_rate, key_format: default_key_format(), segment_bytes: default_segment_bytes() }
    }
}

/// An online rebuild, optionally resizing (`POST /v1/filters/{filter}/rebuild`; the body may be
/// empty).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Rebuild {
    /// New capacity; unset = the filter's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<u64>,
    /// New target false-positive rate; unset = the filter's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fp_rate: Option<f64>,
}

/// A rebuild accepted (202): it runs in the background; its progress is in the stats.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RebuildStarted {
    /// The filter.
    pub filter: String,
    /// Always true.
    pub rebuilding: bool,
}

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
    /// The generation answering lookups; none while its bits are lost.
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
    /// Segments.
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
}

/// An error answer (RFC 9457 problem details, `application/problem+json`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Problem {
    /// Always `about:blank`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The status's reason phrase.
    pub title: String,
    /// The HTTP status.
    pub status: u16,
    /// What went wrong.
    pub detail: String,
    /// What to do about it.
    #[serde(default)]
    pub hint: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_read_as_the_origin_writes_them() {
        let text = r#"{"filter":"f","key":"k","seen":true,"answered_by":"database","value":{"base64":"AAE="}}"#;
        let answer: KeyAnswer = serde_json::from_str(text).unwrap();
        assert_eq!(answer.answered_by, AnsweredBy::Database);
        assert_eq!(answer.value, Some(StoredValue::Binary { base64: "AAE=".into() }));
        let plain: KeyAnswer =
            serde_json::from_str(r#"{"filter":"f","key":"k","seen":false,"answered_by":"filter"}"#).unwrap();
        assert_eq!(plain.value, None);
        assert_eq!(
            serde_json::to_string(&plain).unwrap(),
            r#"{"filter":"f","key":"k","seen":false,"answered_by":"filter"}"#
        );
    }

    #[test]
    fn a_filter_to_create_has_defaults_and_refuses_unknown_fields() {
        let create: CreateFilter = serde_json::from_str(r#"{"capacity":10,"fp_rate":0.01}"#).unwrap();
        assert_eq!(create, CreateFilter::new(10, 0.01));
        assert!(serde_json::from_str::<CreateFilter>(r#"{"capacity":10,"fp_rate":0.01,"size":1}"#).is_err());
        assert_eq!(serde_json::to_string(&Rebuild::default()).unwrap(), "{}");
    }

    #[test]
    fn stats_of_a_filter_being_rebuilt_after_a_loss_read_too() {
        let text = r#"{"filter":"f","generation":null,"building_generation":7,"rebuild":null}"#;
        let stats: FilterStats = serde_json::from_str(text).unwrap();
        assert_eq!((stats.generation, stats.building_generation, stats.k), (None, Some(7), None));
    }
}
