//! The client: one method per API call, each answering the call's type or an [`Error`] that
//! says whether trying again can help. It speaks to an origin or to an edge alike (the edge
//! answers lookups only).

use crate::api::{
    AnsweredBy, CreateFilter, DropKeys, FilterDropped, FilterList, FilterStats, KeyAnswer, KeyDeleted, KeyStored, Keys,
    KeysStored, Lookups, Problem, Rebuild, RebuildStarted,
};
use crate::{headers, media, paths};
use reqwest::{Method, RequestBuilder, Response, StatusCode};
use serde::de::DeserializeOwned;
use std::time::Duration;

/// A call that did not give its answer.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The server answered with an error status.
    #[error("the server answered {status}: {}", problem.as_ref().map_or(body.as_str(), |p| p.detail.as_str()))]
    Api {
        /// The HTTP status.
        status: u16,
        /// The problem details, when the body was one.
        problem: Option<Problem>,
        /// The body as text.
        body: String,
        /// How long the server asked to wait (`Retry-After`, 429 and 503).
        retry_after: Option<Duration>,
    },
    /// No answer: the server could not be reached, or the connection broke.
    #[error("no answer from the server: {0}")]
    Transport(#[from] reqwest::Error),
    /// An answer that is not the call's type.
    #[error("unexpected answer from the server ({status}): {detail}")]
    Decode {
        /// The HTTP status.
        status: u16,
        /// What did not parse.
        detail: String,
    },
}

impl Error {
    /// The HTTP status of an error answer.
    pub fn status(&self) -> Option<u16> {
        match self {
            Error::Api { status, .. } | Error::Decode { status, .. } => Some(*status),
            Error::Transport(e) => e.status().map(|s| s.as_u16()),
        }
    }

    /// Whether the same call may succeed later: overload (429), the stores (5xx), no answer.
    /// A 4xx is the caller's to fix.
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::Api { status, .. } => *status == 429 || *status >= 500,
            Error::Transport(_) => true,
            Error::Decode { .. } => false,
        }
    }

    /// How long the server asked to wait before trying again.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Error::Api { retry_after, .. } => *retry_after,
            _ => None,
        }
    }
}

/// The wait a `Retry-After` header asks for, in its seconds form (bloomgate's).
pub fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    let value = headers.get(headers::RETRY_AFTER)?.to_str().ok()?;
    headers::retry_after_secs(value).map(Duration::from_secs)
}

/// The answer to a `HEAD` lookup: the status and the `x-bloomgate-answered-by` header, no body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Presence {
    /// Whether the key is stored (200) or not (404). `false` is certain.
    pub seen: bool,
    /// Who answered.
    pub answered_by: AnsweredBy,
}

/// A client of one origin (every call) or edge (lookups). Cheap to clone (the connection pool
/// is shared).
#[derive(Clone, Debug)]
pub struct Client {
    base: String,
    http: reqwest::Client,
    token: Option<String>,
}

impl Client {
    /// A client of the server at `base` (`http://host:port`), without a token.
    pub fn new(base: &str) -> Client {
        Client::with_http(base, reqwest::Client::new())
    }

    /// The same over a configured HTTP client (timeouts, pool).
    pub fn with_http(base: &str, http: reqwest::Client) -> Client {
        Client { base: base.trim_end_matches('/').to_owned(), http, token: None }
    }

    /// This client with a bearer token: a writer token (writes, creates, drops, rebuilds, and
    /// every read), or an ops token (stats and the filter list only).
    pub fn with_token(mut self, token: &str) -> Client {
        self.token = Some(token.to_owned());
        self
    }

    /// The server's base URL.
    pub fn base(&self) -> &str {
        &self.base
    }

    fn request(&self, method: Method, path: &str) -> RequestBuilder {
        let request = self.http.request(method, format!("{}{path}", self.base));
        match &self.token {
            Some(token) => request.bearer_auth(token),
            None => request,
        }
    }

    /// Creates a filter (201), or confirms one with the same definition exists (200).
    pub async fn create_filter(&self, filter: &str, create: &CreateFilter) -> Result<FilterStats, Error> {
        answer(self.request(Method::PUT, &paths::filter(filter)).json(create).send().await?).await
    }

    /// Every filter, by name.
    pub async fn list_filters(&self) -> Result<FilterList, Error> {
        answer(self.request(Method::GET, paths::FILTERS).send().await?).await
    }

    /// Drops a filter: its bits, journal and definition; its keys in the database as `keys`
    /// says. Lookups and writes then answer 404 "no such filter".
    pub async fn drop_filter(&self, filter: &str, keys: DropKeys) -> Result<FilterDropped, Error> {
        let request = self.request(Method::DELETE, &paths::filter(filter)).query(&[("keys", keys.as_str())]);
        answer(request.send().await?).await
    }

    /// A filter's state and health.
    pub async fn stats(&self, filter: &str) -> Result<FilterStats, Error> {
        answer(self.request(Method::GET, &paths::stats(filter)).send().await?).await
    }

    /// Looks one key up. "Not seen" is an answer (a 404 with a [`KeyAnswer`]), not an error; a
    /// filter that does not exist is an error (a 404 with a [`Problem`]).
    pub async fn lookup(&self, filter: &str, key: &str) -> Result<KeyAnswer, Error> {
        let response = self.request(Method::GET, &paths::key(filter, key)).send().await?;
        if response.status() == StatusCode::NOT_FOUND && !is_problem(&response) {
            return parse(response).await;
        }
        answer(response).await
    }

    /// Looks one key up with `HEAD`: whether it is stored and who answered, without a body.
    pub async fn exists(&self, filter: &str, key: &str) -> Result<Presence, Error> {
        let response = self.request(Method::HEAD, &paths::key(filter, key)).send().await?;
        let status = response.status();
        let seen = match status {
            StatusCode::OK => true,
            StatusCode::NOT_FOUND if !is_problem(&response) => false,
            _ => return Err(error(response).await),
        };
        let by = response.headers().get(headers::ANSWERED_BY).and_then(|v| v.to_str().ok());
        let answered_by = by.and_then(AnsweredBy::parse).ok_or_else(|| Error::Decode {
            status: status.as_u16(),
            detail: format!("no valid {} header: {by:?}", headers::ANSWERED_BY),
        })?;
        Ok(Presence { seen, answered_by })
    }

    /// Looks a batch of keys up (at most the server's `max_batch`).
    pub async fn lookup_batch(&self, filter: &str, keys: &[String]) -> Result<Lookups, Error> {
        let body = Keys { keys: keys.to_vec() };
        answer(self.request(Method::POST, &paths::lookups(filter)).json(&body).send().await?).await
    }

    /// Stores one key with `value` (may be empty).
    pub async fn insert(&self, filter: &str, key: &str, value: &[u8]) -> Result<KeyStored, Error> {
        let request = self
            .request(Method::PUT, &paths::key(filter, key))
            .header(headers::CONTENT_TYPE, media::OCTET_STREAM)
            .body(value.to_vec());
        answer(request.send().await?).await
    }

    /// Stores a batch of keys (at most the origin's `max_batch`), all or none acknowledged.
    pub async fn insert_batch(&self, filter: &str, keys: &[String]) -> Result<KeysStored, Error> {
        let body = Keys { keys: keys.to_vec() };
        answer(self.request(Method::POST, &paths::keys(filter)).json(&body).send().await?).await
    }

    /// Deletes one key.
    pub async fn delete(&self, filter: &str, key: &str) -> Result<KeyDeleted, Error> {
        answer(self.request(Method::DELETE, &paths::key(filter, key)).send().await?).await
    }

    /// Starts an online rebuild, optionally resizing; 409 (an error) if one runs.
    pub async fn rebuild(&self, filter: &str, rebuild: &Rebuild) -> Result<RebuildStarted, Error> {
        answer(self.request(Method::POST, &paths::rebuild(filter)).json(rebuild).send().await?).await
    }
}

fn is_problem(response: &Response) -> bool {
    let content_type = response.headers().get(headers::CONTENT_TYPE).and_then(|v| v.to_str().ok());
    content_type.is_some_and(media::is_problem)
}

/// The call's type from a success, else the error answer.
async fn answer<T: DeserializeOwned>(response: Response) -> Result<T, Error> {
    if response.status().is_success() {
        return parse(response).await;
    }
    Err(error(response).await)
}

/// An error answer, with its problem body when it has one.
async fn error(response: Response) -> Error {
    let status = response.status().as_u16();
    let retry_after = retry_after(response.headers());
    let body = match response.text().await {
        Ok(body) => body,
        Err(e) => return Error::Transport(e),
    };
    let problem = serde_json::from_str(&body).ok();
    Error::Api { status, problem, body, retry_after }
}

async fn parse<T: DeserializeOwned>(response: Response) -> Result<T, Error> {
    let status = response.status().as_u16();
    let bytes = response.bytes().await?;
    serde_json::from_slice(&bytes).map_err(|e| Error::Decode { status, detail: e.to_string() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_escaped_as_one_path_segment() {
        let client = Client::new("http://origin:8080/");
        let request = client.request(Method::GET, &paths::key("f", "a/b c%d?é")).build().unwrap();
        assert_eq!(request.url().as_str(), "http://origin:8080/v1/filters/f/keys/a%2Fb%20c%25d%3F%C3%A9");
    }

    #[test]
    fn only_overload_the_stores_and_silence_are_worth_a_retry() {
        let api = |status| Error::Api { status, problem: None, body: String::new(), retry_after: None };
        assert!(api(429).is_retryable() && api(503).is_retryable());
        assert!(!api(400).is_retryable() && !api(404).is_retryable() && !api(409).is_retryable());
    }

    #[test]
    fn retry_after_is_read_in_seconds() {
        let mut h = reqwest::header::HeaderMap::new();
        assert_eq!(retry_after(&h), None);
        h.insert(reqwest::header::RETRY_AFTER, "3".parse().unwrap());
        assert_eq!(retry_after(&h), Some(Duration::from_secs(3)));
        h.insert(reqwest::header::RETRY_AFTER, "Wed, 21 Oct 2026 07:28:00 GMT".parse().unwrap());
        assert_eq!(retry_after(&h), None, "the date form is not the origin's");
    }
}
