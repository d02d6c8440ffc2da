//! A batch lookup's body, bounded while it is read and while it is parsed: a body is refused
//! as soon as it passes its byte limit (whether it declared a length or not), and its keys as
//! soon as they pass the batch limit, so neither is held whole before it is judged.
//!
//! The body's shape is the wire contract's `Keys` (`{"keys": [...]}`, no other field), parsed
//! by the contract's `parse_batch_keys`, as at the origin.

use bloomgate_client::api::{parse_batch_keys, BatchKeysError};

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

/// The keys of a batch body, at most `max_keys` of them (the wire contract's one parser).
pub fn parse_keys(body: &[u8], max_keys: usize) -> Result<Vec<String>, BatchBodyError> {
    parse_batch_keys(body, max_keys).map_err(|e| match e {
        BatchKeysError::TooMany(n) => BatchBodyError::TooManyKeys(n),
        BatchKeysError::Invalid(words) => BatchBodyError::Invalid(words),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_contracts_refusals_keep_their_meaning() {
        assert_eq!(parse_keys(br#"{"keys":["a","b"]}"#, 2), Ok(vec!["a".into(), "b".into()]));
        assert_eq!(parse_keys(br#"{"keys":["a","b","c"]}"#, 2), Err(BatchBodyError::TooManyKeys(3)));
        assert!(matches!(parse_keys(br#"{"keyz":[]}"#, 2), Err(BatchBodyError::Invalid(_))));
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
