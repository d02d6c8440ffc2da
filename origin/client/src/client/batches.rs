//! Batch calls: any number of keys, sent in requests of at most the client's `max_batch` keys,
//! one after another, the answers joined in the order of the keys. Keys are serialized from
//! the caller's slice, never copied into a body type first.

use super::{Client, Error};
use crate::api::{KeysStored, Lookups};
use crate::paths;
use serde::de::DeserializeOwned;
use serde::ser::{Serialize, SerializeStruct, Serializer};
use std::sync::atomic::Ordering;

impl Client {
    /// Looks keys up: one answer per key, in the order asked. Any number of keys: more than
    /// [`max_batch`](Self::max_batch) are asked in several requests, one after another. An
    /// error in any of them is the call's error (no answers are returned then).
    ///
    /// An empty batch is still one request, so a filter that does not exist is still an error.
    pub async fn lookup_batch(&self, filter: &str, keys: &[impl AsRef<str>]) -> Result<Lookups, Error> {
        let path = paths::lookups(filter);
        let mut joined = Lookups { filter: filter.to_owned(), results: Vec::with_capacity(keys.len()) };
        for (asked, answer) in self.post_in_batches::<_, Lookups>(&path, keys).await? {
            if answer.results.len() != asked {
                return Err(Error::Decode {
                    status: 200,
                    detail: format!("{asked} keys asked, {} answers", answer.results.len()),
                });
            }
            joined.filter = answer.filter;
            joined.results.extend(answer.results);
        }
        Ok(joined)
    }

    /// Stores keys (with empty values). Any number of keys: more than
    /// [`max_batch`](Self::max_batch) are sent in several requests, one after another, and the
    /// answer counts them all.
    ///
    /// Each request is stored whole or not at all, but when one fails after others succeeded,
    /// the keys of those others **are stored** although the call returns the error. Writes are
    /// idempotent (storing a stored key again changes nothing), so the remedy is to send the
    /// same batch again.
    pub async fn insert_batch(&self, filter: &str, keys: &[impl AsRef<str>]) -> Result<KeysStored, Error> {
        let path = paths::keys(filter);
        let mut joined = KeysStored { filter: filter.to_owned(), stored: 0 };
        for (_, answer) in self.post_in_batches::<_, KeysStored>(&path, keys).await? {
            joined.filter = answer.filter;
            joined.stored += answer.stored;
        }
        Ok(joined)
    }

    /// Posts `keys` to `path` in chunks of at most `max_batch`, in order; each chunk's size and
    /// answer. A 413 that names a smaller limit lowers `max_batch` to it (for this client and
    /// its clones) and the chunk is sent again, split.
    async fn post_in_batches<K: AsRef<str>, T: DeserializeOwned>(
        &self,
        path: &str,
        keys: &[K],
    ) -> Result<Vec<(usize, T)>, Error> {
        let mut answers = Vec::with_capacity(keys.len().div_ceil(self.max_batch()).max(1));
        let mut rest = keys;
        loop {
            let size = self.max_batch().min(rest.len());
            let (chunk, tail) = rest.split_at(size);
            match self.post_json(path, &KeysBody(chunk)).await {
                Ok(answer) => answers.push((size, answer)),
                Err(e) => match e.batch_limit() {
                    Some(limit) if limit > 0 && limit < size => {
                        self.max_batch.fetch_min(limit, Ordering::Relaxed);
                        continue;
                    }
                    _ => return Err(e),
                },
            }
            rest = tail;
            if rest.is_empty() {
                return Ok(answers);
            }
        }
    }
}

/// `{"keys": [...]}` written from borrowed keys: the wire's [`Keys`](crate::api::Keys) body,
/// byte for byte.
struct KeysBody<'a, K>(&'a [K]);

impl<K: AsRef<str>> Serialize for KeysBody<'_, K> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut body = serializer.serialize_struct("Keys", 1)?;
        body.serialize_field("keys", &KeyList(self.0))?;
        body.end()
    }
}

struct KeyList<'a, K>(&'a [K]);

impl<K: AsRef<str>> Serialize for KeyList<'_, K> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.0.iter().map(AsRef::as_ref))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::Keys;

    #[test]
    fn a_borrowed_batch_is_written_as_the_wire_s_keys_body() {
        let keys = ["a", "b\"c", "é"];
        let owned = Keys { keys: keys.iter().map(|k| k.to_string()).collect() };
        assert_eq!(serde_json::to_string(&KeysBody(&keys)).unwrap(), serde_json::to_string(&owned).unwrap());
        let none: [String; 0] = [];
        assert_eq!(serde_json::to_string(&KeysBody(&none)).unwrap(), r#"{"keys":[]}"#);
    }
}
