//! A batch lookup's body, bounded while it is read and while it is parsed: a body is refused
//! as soon as it passes its byte limit (whether it declared a length or not), and its keys as
//! soon as they pass the batch limit, so neither is held whole before it is judged.
//!
//! The body's shape is the wire contract's `Keys` (`{"keys": [...]}`, no other field).

use core::fmt;
use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};

/// Why a batch body was refused.
#[derive(Debug, PartialEq, Eq)]
pub enum BatchBodyError {
    /// More than the byte limit.
    TooLarge,
    /// More keys than the batch limit: how many it has (the rest are counted, not kept).
    TooManyKeys(usize),
    /// Not a `{"keys": [...]}` of strings.
    Invalid(String),
}

/// The bytes of a body read chunk by chunk, refused once past `max_bytes`.
#[derive(Debug, Default)]
pub struct BoundedBody {
    bytes: Vec<u8>,
    max_bytes: usize,
}

impl BoundedBody {
    /// An empty body that may grow to `max_bytes`.
    pub fn new(max_bytes: usize) -> BoundedBody {
        BoundedBody { bytes: Vec::new(), max_bytes }
    }

    /// Adds a chunk; too large once past the limit (the chunk is not kept).
    pub fn push(&mut self, chunk: &[u8]) -> Result<(), BatchBodyError> {
        if self.bytes.len() + chunk.len() > self.max_bytes {
            return Err(BatchBodyError::TooLarge);
        }
        self.bytes.extend_from_slice(chunk);
        Ok(())
    }

    /// The bytes read.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The bytes read, kept.
    pub fn into_bytes(self) -> Vec<u8> {
        self.bytes
    }
}

/// The keys of a batch body, at most `max_keys` of them.
pub fn parse_keys(body: &[u8], max_keys: usize) -> Result<Vec<String>, BatchBodyError> {
    let mut de = serde_json::Deserializer::from_slice(body);
    let keys = BodySeed { max_keys }.deserialize(&mut de).map_err(|e| BatchBodyError::Invalid(e.to_string()))?;
    de.end().map_err(|e| BatchBodyError::Invalid(e.to_string()))?;
    match keys {
        Counted::Kept(keys) => Ok(keys),
        Counted::Over(n) => Err(BatchBodyError::TooManyKeys(n)),
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
        assert_eq!(parse_keys(br#"{"keys":["a","b","c"]}"#, 3), Ok(vec!["a".into(), "b".into(), "c".into()]));
        assert_eq!(parse_keys(br#"{"keys":[]}"#, 3), Ok(vec![]));
    }

    #[test]
    fn keys_past_the_limit_are_counted_not_kept() {
        assert_eq!(parse_keys(br#"{"keys":["a","b","c","d"]}"#, 2), Err(BatchBodyError::TooManyKeys(4)));
    }

    #[test]
    fn the_body_has_the_contracts_shape() {
        for body in [&br#"{"keys":["a"],"x":1}"#[..], br#"{}"#, br#"["a"]"#, br#"{"keys":[1]}"#, br#"{"keys":["a"]} x"#]
        {
            assert!(
                matches!(parse_keys(body, 10), Err(BatchBodyError::Invalid(_))),
                "{}",
                String::from_utf8_lossy(body)
            );
        }
        // The contract's own type reads the same bodies the same way.
        let keys: bloomgate_client::api::Keys = serde_json::from_slice(br#"{"keys":["a","b"]}"#).unwrap();
        assert_eq!(parse_keys(br#"{"keys":["a","b"]}"#, 10), Ok(keys.keys));
    }

    #[test]
    fn a_body_is_refused_once_past_its_limit() {
        let mut body = BoundedBody::new(8);
        assert_eq!(body.push(b"12345"), Ok(()));
        assert_eq!(body.push(b"678"), Ok(()));
        assert_eq!(body.push(b"9"), Err(BatchBodyError::TooLarge));
        assert_eq!(body.bytes(), b"12345678");
    }
}
