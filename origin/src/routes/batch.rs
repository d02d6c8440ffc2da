//! The body of batch requests, `{"keys": [...]}`, read with a bound on the number of keys:
//! parsing stops at the first key past `max_batch`, so an oversized batch is refused without
//! allocating it.

use super::AppState;
use crate::error::AppError;
use axum::extract::{FromRequest, Request};
use axum::http::header::CONTENT_TYPE;
use bloomgate_client::media;
use serde::de::{DeserializeSeed, Error as _, IgnoredAny, MapAccess, SeqAccess, Visitor};
use std::fmt;

/// Marks the parse error that means "too many keys" (the rest are malformed bodies).
const TOO_MANY: &str = "bloomgate: too many keys";

/// The keys of a batch request, at most `max_batch` of them.
pub struct KeysBatch(pub Vec<String>);

impl FromRequest<AppState> for KeysBatch {
    type Rejection = AppError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, Self::Rejection> {
        let is_json = req.headers().get(CONTENT_TYPE).and_then(|v| v.to_str().ok()).is_some_and(media::is_json);
        if !is_json {
            return Err(AppError::BadRequest("send the body as JSON with 'Content-Type: application/json'".into()));
        }
        let super::ApiBytes(body) = super::ApiBytes::from_request(req, state).await?;
        parse_keys(&body, state.config.max_batch).map(KeysBatch)
    }
}

/// Parses `{"keys": [...]}` with at most `max` keys.
pub fn parse_keys(body: &[u8], max: usize) -> Result<Vec<String>, AppError> {
    let mut de = serde_json::Deserializer::from_slice(body);
    let keys = BatchBody { max }.deserialize(&mut de).and_then(|keys| de.end().map(|()| keys));
    keys.map_err(|e| {
        if e.to_string().starts_with(TOO_MANY) {
            AppError::BatchTooLarge { max }
        } else {
            AppError::BadRequest(format!("invalid JSON body: {e}; expected {{\"keys\": [\"...\", ...]}}"))
        }
    })
}

struct BatchBody {
    max: usize,
}

impl<'de> DeserializeSeed<'de> for BatchBody {
    type Value = Vec<String>;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Vec<String>, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for BatchBody {
    type Value = Vec<String>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object {\"keys\": [...]}")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Vec<String>, A::Error> {
        let mut keys = None;
        while let Some(field) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            if field != "keys" {
                let _: IgnoredAny = map.next_value()?;
                return Err(A::Error::custom(format!("unknown field `{field}`, expected `keys`")));
            }
            if keys.is_some() {
                return Err(A::Error::custom("duplicate field `keys`"));
            }
            keys = Some(map.next_value_seed(Bounded { max: self.max })?);
        }
        keys.ok_or_else(|| A::Error::custom("missing field `keys`"))
    }
}

/// A sequence of strings that refuses its `max + 1`-th element.
struct Bounded {
    max: usize,
}

impl<'de> DeserializeSeed<'de> for Bounded {
    type Value = Vec<String>;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Vec<String>, D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for Bounded {
    type Value = Vec<String>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an array of key strings")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<String>, A::Error> {
        let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(self.max));
        while let Some(key) = seq.next_element::<String>()? {
            if out.len() == self.max {
                return Err(A::Error::custom(TOO_MANY));
            }
            out.push(key);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_within_the_limit_parses() {
        assert_eq!(parse_keys(br#"{"keys":["a","b"]}"#, 2).unwrap(), ["a", "b"]);
        assert_eq!(parse_keys(br#"{"keys":[]}"#, 2).unwrap(), Vec::<String>::new());
    }

    #[test]
    fn parsing_stops_at_the_first_key_too_many() {
        let err = parse_keys(br#"{"keys":["a","b","c", this is never read"#, 2).unwrap_err();
        assert!(matches!(err, AppError::BatchTooLarge { max: 2 }), "{err}");
    }

    #[test]
    fn malformed_bodies_say_what_is_expected() {
        for body in [&br#"{"keyz":[]}"#[..], br#"{}"#, br#"{"keys":[1]}"#, br#"["a"]"#, br#"{"keys":["a"]} x"#] {
            let err = parse_keys(body, 5).unwrap_err();
            assert!(matches!(err, AppError::BadRequest(_)), "{}: {err}", String::from_utf8_lossy(body));
        }
    }
}
