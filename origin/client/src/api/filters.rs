//! Filters as their users manage them: create, list, rebuild, drop.

use bloomgate_filter::KeyFormat;
use serde::{Deserialize, Serialize};

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
    /// A filter created again after a drop keeps the key format it had.
    #[serde(default = "default_key_format")]
    #[cfg_attr(feature = "openapi", schema(value_type = String, example = "hex:64"))]
    pub key_format: KeyFormat,
    /// Bytes per segment, a power of two (default 65536).
    #[serde(default = "default_segment_bytes")]
    pub segment_bytes: u64,
    /// What an origin's "no" from its local copy of the filter promises, and who pays for it:
    /// `lease` or `barrier`; unset = the origin's `read_consistency`. Kept by the filter's later
    /// generations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_consistency: Option<ReadConsistency>,
}

/// How an origin answers "no" from its local copy of a filter. Both keep the one promise: a key
/// whose write was acknowledged through any origin is never answered "not seen" by an origin
/// afterwards.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum ReadConsistency {
    /// A copy answers from memory while its lease holds (L ms after its last complete journal
    /// read was sent), and a write is acknowledged only once every lease that could have missed
    /// it has run out (a few ms more per write). Assumes only that clocks *run* at a rate within
    /// a bound (ρ), never that they agree.
    #[default]
    Lease,
    /// A copy answers only after a journal read sent after the lookup arrived (one Redis round
    /// trip, shared by the lookups that arrived before it). No clock assumption at all; writes
    /// do not wait.
    Barrier,
}

impl ReadConsistency {
    /// As the API and the settings spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            ReadConsistency::Lease => "lease",
            ReadConsistency::Barrier => "barrier",
        }
    }
}

impl std::str::FromStr for ReadConsistency {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "lease" => Ok(ReadConsistency::Lease),
            "barrier" => Ok(ReadConsistency::Barrier),
            other => Err(format!("read_consistency {other:?} is not one of lease, barrier")),
        }
    }
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
        CreateFilter {
            capacity,
            fp_rate,
            key_format: default_key_format(),
            segment_bytes: default_segment_bytes(),
            read_consistency: None,
        }
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

/// One filter of the list (`GET /v1/filters`): its definition and the generation answering.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct FilterSummary {
    /// The filter's name.
    pub name: String,
    /// How keys are written.
    pub key_format: String,
    /// Keys it is sized for.
    pub capacity: u64,
    /// Target false-positive rate at capacity.
    pub fp_rate: f64,
    /// Bytes per segment.
    pub segment_bytes: u64,
    /// The generation answering lookups; none while its bits are being built or cannot be
    /// read (lookups then read the database), or while it is being dropped.
    pub generation: Option<u64>,
    /// A drop of this filter began and did not finish: lookups and writes answer 404; send
    /// the `DELETE` again to finish it.
    pub dropping: bool,
}

/// Every filter (`GET /v1/filters`), by name.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct FilterList {
    /// The filters, sorted by name.
    pub filters: Vec<FilterSummary>,
}

/// What a drop does with the filter's keys in the database (`DELETE /v1/filters/{filter}?keys=`).
///
/// `keep` is the default: the database is the source of truth, often read by more than
/// bloomgate, and deleting its rows cannot be undone, while a filter dropped with its keys
/// kept comes back whole by creating it again (its first generation is then built from those
/// keys). Deleting is asked for by name.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum DropKeys {
    /// Leave the filter's keys in the database (the default).
    #[default]
    Keep,
    /// Delete the filter's keys from the database too.
    Delete,
}

impl DropKeys {
    /// As the query writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            DropKeys::Keep => "keep",
            DropKeys::Delete => "delete",
        }
    }
}

/// The query of a drop: `?keys=keep` (the default) or `?keys=delete`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams))]
#[cfg_attr(feature = "openapi", into_params(parameter_in = Query))]
pub struct DropQuery {
    /// What happens to the filter's keys in the database: `keep` (default) or `delete`.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", param(value_type = String, example = "keep"))]
    pub keys: DropKeys,
}

/// A filter dropped (`DELETE /v1/filters/{filter}`, 200): its bits, journal, definition and
/// bookkeeping are gone; lookups and writes answer 404 "no such filter".
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct FilterDropped {
    /// The filter.
    pub filter: String,
    /// Always true.
    pub dropped: bool,
    /// What was done with its keys in the database.
    pub keys: DropKeys,
    /// Keys deleted from the database (`keys=delete` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keys_deleted: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_filter_to_create_has_defaults_and_refuses_unknown_fields() {
        let create: CreateFilter = serde_json::from_str(r#"{"capacity":10,"fp_rate":0.01}"#).unwrap();
        assert_eq!(create, CreateFilter::new(10, 0.01));
        assert_eq!(
            serde_json::to_string(&create).unwrap(),
            r#"{"capacity":10,"fp_rate":0.01,"key_format":"hex:64","segment_bytes":65536}"#
        );
        assert!(serde_json::from_str::<CreateFilter>(r#"{"capacity":10,"fp_rate":0.01,"size":1}"#).is_err());
        assert_eq!(serde_json::to_string(&Rebuild::default()).unwrap(), "{}");
        assert_eq!(serde_json::to_string(&Rebuild { capacity: Some(5), fp_rate: None }).unwrap(), r#"{"capacity":5}"#);
        assert_eq!(
            serde_json::to_string(&RebuildStarted { filter: "f".into(), rebuilding: true }).unwrap(),
            r#"{"filter":"f","rebuilding":true}"#
        );
    }

    #[test]
    fn golden_list_and_drop() {
        let list = FilterList {
            filters: vec![FilterSummary {
                name: "f".into(),
                key_format: "hex:64".into(),
                capacity: 10,
                fp_rate: 0.01,
                segment_bytes: 1024,
                generation: Some(7),
                dropping: false,
            }],
        };
        let text = r#"{"filters":[{"name":"f","key_format":"hex:64","capacity":10,"fp_rate":0.01,"segment_bytes":1024,"generation":7,"dropping":false}]}"#;
        assert_eq!(serde_json::to_string(&list).unwrap(), text);
        assert_eq!(serde_json::from_str::<FilterList>(text).unwrap(), list);
        let dropped =
            FilterDropped { filter: "f".into(), dropped: true, keys: DropKeys::Delete, keys_deleted: Some(3) };
        let text = r#"{"filter":"f","dropped":true,"keys":"delete","keys_deleted":3}"#;
        assert_eq!(serde_json::to_string(&dropped).unwrap(), text);
        assert_eq!(serde_json::from_str::<FilterDropped>(text).unwrap(), dropped);
        let kept = FilterDropped { keys: DropKeys::Keep, keys_deleted: None, ..dropped };
        assert_eq!(serde_json::to_string(&kept).unwrap(), r#"{"filter":"f","dropped":true,"keys":"keep"}"#);
    }

    #[test]
    fn a_drop_keeps_the_keys_unless_told_otherwise() {
        let query = |text: &str| serde_json::from_str::<DropQuery>(text).map(|q| q.keys);
        assert_eq!(query("{}").unwrap(), DropKeys::Keep);
        assert_eq!(query(r#"{"keys":"delete"}"#).unwrap(), DropKeys::Delete);
        assert!(query(r#"{"keys":"all"}"#).is_err());
        assert!(query(r#"{"key":"delete"}"#).is_err(), "a misspelt flag is refused, not ignored");
    }
}
