//! Lookup and write answers: who answered, a key's answer, a batch's answers, what a write
//! stored.

use serde::{Deserialize, Serialize};

/// Who answered a lookup: the one list of answerers, for the body's `answered_by`, the
/// `x-bloomgate-answered-by` header and the origin's `answered_by` metric label.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum AnsweredBy {
    /// The origin's filter: "not seen", without the database.
    Filter,
    /// The database: after the filter's "maybe", or when the filter could not answer.
    Database,
    /// The edge, from its copy of the filter: "not seen", without the origin.
    Edge,
}

impl AnsweredBy {
    /// Every answerer, in order.
    pub const ALL: [AnsweredBy; 3] = [AnsweredBy::Filter, AnsweredBy::Database, AnsweredBy::Edge];

    /// As the API writes it (also the `x-bloomgate-answered-by` header's value).
    pub fn as_str(self) -> &'static str {
        match self {
            AnsweredBy::Filter => "filter",
            AnsweredBy::Database => "database",
            AnsweredBy::Edge => "edge",
        }
    }

    /// The answerer a header value names, if any.
    pub fn parse(value: &str) -> Option<AnsweredBy> {
        AnsweredBy::ALL.into_iter().find(|by| by.as_str() == value)
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

/// The answer for one key (`GET /v1/filters/{filter}/keys/{key}`: 200 if seen, 404 if not;
/// a 404 for a filter that does not exist is a [`Problem`](super::Problem) instead).
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

impl KeyAnswer {
    /// "Not seen", answered by `by`.
    pub fn not_seen(filter: &str, key: &str, by: AnsweredBy) -> KeyAnswer {
        KeyAnswer { filter: filter.to_owned(), key: key.to_owned(), seen: false, answered_by: by, value: None }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Serializes `value` and checks it against `golden`, then reads `golden` back as `T`.
    fn golden<T: Serialize + for<'de> Deserialize<'de> + PartialEq + std::fmt::Debug>(value: T, golden: &str) {
        assert_eq!(serde_json::to_string(&value).unwrap(), golden);
        assert_eq!(serde_json::from_str::<T>(golden).unwrap(), value);
    }

    #[test]
    fn golden_key_answers() {
        golden(
            KeyAnswer::not_seen("f", "k", AnsweredBy::Edge),
            r#"{"filter":"f","key":"k","seen":false,"answered_by":"edge"}"#,
        );
        golden(
            KeyAnswer::not_seen("f", "k", AnsweredBy::Filter),
            r#"{"filter":"f","key":"k","seen":false,"answered_by":"filter"}"#,
        );
        golden(
            KeyAnswer {
                value: Some(StoredValue::Binary { base64: "AAE=".into() }),
                seen: true,
                ..KeyAnswer::not_seen("f", "k", AnsweredBy::Database)
            },
            r#"{"filter":"f","key":"k","seen":true,"answered_by":"database","value":{"base64":"AAE="}}"#,
        );
        golden(
            KeyAnswer {
                value: Some(StoredValue::Text("v".into())),
                seen: true,
                ..KeyAnswer::not_seen("f", "k", AnsweredBy::Database)
            },
            r#"{"filter":"f","key":"k","seen":true,"answered_by":"database","value":"v"}"#,
        );
        golden(
            Lookups { filter: "f".into(), results: vec![KeyAnswer::not_seen("f", "a", AnsweredBy::Edge)] },
            r#"{"filter":"f","results":[{"filter":"f","key":"a","seen":false,"answered_by":"edge"}]}"#,
        );
    }

    #[test]
    fn golden_write_answers() {
        golden(Keys { keys: vec!["a".into(), "b".into()] }, r#"{"keys":["a","b"]}"#);
        golden(
            KeyStored { filter: "f".into(), key: "k".into(), stored: true },
            r#"{"filter":"f","key":"k","stored":true}"#,
        );
        golden(KeysStored { filter: "f".into(), stored: 2 }, r#"{"filter":"f","stored":2}"#);
        golden(
            KeyDeleted { filter: "f".into(), key: "k".into(), deleted: false },
            r#"{"filter":"f","key":"k","deleted":false}"#,
        );
        assert!(serde_json::from_str::<Keys>(r#"{"keys":[],"more":1}"#).is_err(), "unknown fields are refused");
    }

    #[test]
    fn answerers_read_back_from_their_header_value() {
        for by in AnsweredBy::ALL {
            assert_eq!(AnsweredBy::parse(by.as_str()), Some(by));
            assert_eq!(serde_json::to_string(&by).unwrap(), format!("\"{}\"", by.as_str()));
        }
        assert_eq!(AnsweredBy::parse("cache"), None);
    }
}
