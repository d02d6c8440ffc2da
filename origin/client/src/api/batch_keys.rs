//! A batch request's body, [`Keys`](super::Keys) (`{"keys": [...]}`, no other field), read
//! with a bound on its keys: past the bound the keys are counted, never kept, so an oversized
//! batch is refused without holding it. The origin and the edge both read batches with it.

use core::fmt;
use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};

/// Why a batch body's keys were refused.
#[derive(Debug, PartialEq, Eq)]
pub enum BatchKeysError {
    /// More keys than the limit: how many there are.
    TooMany(usize),
    /// Not a `{"keys": [...]}` of strings, in the parser's words.
    Invalid(String),
}

impl BatchKeysError {
    /// What a refusal of a batch with `got` keys over the limit of `max` says (413), in the
    /// origin's answers and the edge's alike; [`Self::TOO_MANY_HINT`] says what to do.
    pub fn too_many_detail(max: usize, got: usize) -> String {
        format!("batch has {got} keys; at most {max} are accepted per request")
    }

    /// What to do about a batch over the limit.
    pub const TOO_MANY_HINT: &'static str = "Split the batch into smaller requests.";

    /// The limit a [`Self::too_many_detail`] names; None for any other words. A client learns
    /// the server's `max_batch` from its refusal with this.
    pub fn limit_in_too_many_detail(detail: &str) -> Option<usize> {
        let (_, rest) = detail.strip_prefix("batch has ")?.split_once(" keys; at most ")?;
        let max = rest.strip_suffix(" are accepted per request")?;
        max.parse().ok()
    }
}

/// The keys of a batch body, at most `max_keys` of them.
pub fn parse_batch_keys(body: &[u8], max_keys: usize) -> Result<Vec<String>, BatchKeysError> {
    let mut de = serde_json::Deserializer::from_slice(body);
    let keys = BodySeed { max_keys }.deserialize(&mut de).map_err(|e| BatchKeysError::Invalid(e.to_string()))?;
    de.end().map_err(|e| BatchKeysError::Invalid(e.to_string()))?;
    match keys {
        Counted::Kept(keys) => Ok(keys),
        Counted::Over(n) => Err(BatchKeysError::TooMany(n)),
    }
}

/// Keys kept, or (past the limit) only counted.
enum Counted {
    Kept(Vec<String>),
    Over(usize),
}

struct BodySeed {
    max_keys: usize,
}

impl<'de> DeserializeSeed<'de> for BodySeed {
    type Value = Counted;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Counted, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for BodySeed {
    type Value = Counted;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(r#"an object {"keys": [...]}"#)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Counted, A::Error> {
        let mut keys = None;
        while let Some(field) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            match field.as_ref() {
                "keys" if keys.is_none() => keys = Some(map.next_value_seed(KeysSeed { max_keys: self.max_keys })?),
                "keys" => return Err(de::Error::duplicate_field("keys")),
                other => return Err(de::Error::unknown_field(other, &["keys"])),
            }
        }
        keys.ok_or_else(|| de::Error::missing_field("keys"))
    }
}

struct KeysSeed {
    max_keys: usize,
}

impl<'de> DeserializeSeed<'de> for KeysSeed {
    type Value = Counted;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Counted, D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for KeysSeed {
    type Value = Counted;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an array of keys (strings)")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Counted, A::Error> {
        let mut keys = Vec::with_capacity(self.max_keys.min(seq.size_hint().unwrap_or(0)));
        while let Some(key) = seq.next_element::<String>()? {
            if keys.len() == self.max_keys {
                // Past the limit: counted (for the refusal's words), never kept.
                let mut count = keys.len() + 1;
                drop(keys);
                while seq.next_element::<IgnoredAny>()?.is_some() {
                    count += 1;
                }
                return Ok(Counted::Over(count));
            }
            keys.push(key);
        }
        Ok(Counted::Kept(keys))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_within_the_limit_are_kept_in_order() {
        assert_eq!(parse_batch_keys(br#"{"keys":["a","b","c"]}"#, 3), Ok(vec!["a".into(), "b".into(), "c".into()]));
        assert_eq!(parse_batch_keys(br#"{"keys":[]}"#, 3), Ok(vec![]));
    }

    #[test]
    fn keys_past_the_limit_are_counted_not_kept() {
        assert_eq!(parse_batch_keys(br#"{"keys":["a","b","c","d"]}"#, 2), Err(BatchKeysError::TooMany(4)));
        assert_eq!(BatchKeysError::too_many_detail(2, 4), "batch has 4 keys; at most 2 are accepted per request");
    }

    #[test]
    fn the_limit_reads_back_from_the_refusal_s_words() {
        for (max, got) in [(1, 2), (3, 7), (1000, 1_000_000)] {
            let detail = BatchKeysError::too_many_detail(max, got);
            assert_eq!(BatchKeysError::limit_in_too_many_detail(&detail), Some(max), "{detail}");
        }
        for other in ["", "body over the limit", "batch has 4 keys; at most x are accepted per request"] {
            assert_eq!(BatchKeysError::limit_in_too_many_detail(other), None, "{other}");
        }
    }

    #[test]
    fn the_body_has_the_contracts_shape() {
        for body in [&br#"{"keys":["a"],"x":1}"#[..], br#"{}"#, br#"["a"]"#, br#"{"keys":[1]}"#, br#"{"keys":["a"]} x"#]
        {
            assert!(
                matches!(parse_batch_keys(body, 10), Err(BatchKeysError::Invalid(_))),
                "{}",
                String::from_utf8_lossy(body)
            );
        }
        // The contract's own type reads the same bodies the same way.
        let keys: super::super::Keys = serde_json::from_slice(br#"{"keys":["a","b"]}"#).unwrap();
        assert_eq!(parse_batch_keys(br#"{"keys":["a","b"]}"#, 10), Ok(keys.keys));
    }
}
