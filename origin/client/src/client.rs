//! The client: one method per API call, each answering the call's type or an [`Error`] that
//! says what failed and whether trying again can help. It speaks to an origin or to an edge
//! alike (the edge answers lookups only), over `http://` or `https://`.
//!
//! - this file: [`Client`] and its single-key and filter calls; every request goes through
//!   `exchange`, which tries again as the client's [`RetryPolicy`] says.
//! - `builder`: [`ClientBuilder`], the settings and their defaults.
//! - `base_url`: the check of the server's URL.
//! - `batches`: batch lookups and writes, split to `max_batch` and joined in order.
//! - `retry`: [`RetryPolicy`], the waits between tries.
//! - `error`: [`Error`], and the sorting of the HTTP library's errors into it.

mod base_url;
mod batches;
mod builder;
mod error;
mod retry;

pub use builder::{
    ClientBuilder, DEFAULT_CONNECT_TIMEOUT, DEFAULT_MAX_BATCH, DEFAULT_POOL_IDLE_TIMEOUT, DEFAULT_TIMEOUT,
};
pub use error::Error;
pub use retry::RetryPolicy;

use crate::api::{
    AnsweredBy, CreateFilter, DropKeys, FilterDropped, FilterList, FilterStats, KeyAnswer, KeyDeleted, KeyStored,
    Rebuild, RebuildStarted,
};
use crate::{headers, media, paths};
use reqwest::{Method, Request, RequestBuilder, Response, StatusCode};
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The answer to a `HEAD` lookup: the status and the `x-bloomgate-answered-by` header, no body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Presence {
    /// Whether the key is stored (200) or not (404). `false` is certain.
    pub seen: bool,
    /// Who answered.
    pub answered_by: AnsweredBy,
}

/// A client of one origin (every call) or edge (lookups). Cheap to clone: clones share the
/// connection pool and what the client learnt of the server's `max_batch`.
#[derive(Clone)]
pub struct Client {
    base: Arc<str>,
    http: reqwest::Client,
    token: Option<Arc<str>>,
    /// (connect, request), to say which one ran out.
    timeouts: (Duration, Duration),
    max_batch: Arc<AtomicUsize>,
    /// None: each request is tried once.
    retries: Option<RetryPolicy>,
}

impl Client {
    /// Settings for a client of the server at `url`: `http://HOST:PORT` or `https://HOST:PORT`,
    /// optionally with a path prefix (`https://HOST/bloomgate`), without credentials, query or
    /// fragment. The URL is checked by [`ClientBuilder::build`].
    pub fn builder(url: &str) -> ClientBuilder {
        ClientBuilder::new(url)
    }

    /// A client of the server at `url` with every default: no token, the platform's CA
    /// certificates, [`DEFAULT_CONNECT_TIMEOUT`], [`DEFAULT_TIMEOUT`], [`DEFAULT_MAX_BATCH`], no
    /// retries. An error if the URL cannot name a server (see [`Client::builder`]).
    pub fn new(url: &str) -> Result<Client, Error> {
        Client::builder(url).build()
    }

    /// This client, sharing its connections, with every request tried again as `policy` says
    /// (after 429, 5xx, no connection, a timeout; never after other answers). A write tried
    /// again is safe: writes and deletes are idempotent. A drop or a rebuild tried again after
    /// the first try took effect answers 404 or 409.
    pub fn with_retries(&self, policy: RetryPolicy) -> Client {
        Client { retries: Some(policy), ..self.clone() }
    }

    /// The server's base URL, as checked (no trailing `/`).
    pub fn base(&self) -> &str {
        &self.base
    }

    /// Keys per batch request: the builder's [`max_batch`](ClientBuilder::max_batch), or the
    /// smaller limit a server named when it refused a batch.
    pub fn max_batch(&self) -> usize {
        self.max_batch.load(Ordering::Relaxed)
    }

    /// Creates a filter (201), or confirms one with the same definition exists (200).
    pub async fn create_filter(&self, filter: &str, create: &CreateFilter) -> Result<FilterStats, Error> {
        self.call(self.request(Method::PUT, &paths::filter(filter)).json(create)).await
    }

    /// Every filter, by name.
    pub async fn list_filters(&self) -> Result<FilterList, Error> {
        self.call(self.request(Method::GET, paths::FILTERS)).await
    }

    /// Drops a filter: its bits, journal and definition; its keys in the database as `keys`
    /// says. Lookups and writes then answer 404 "no such filter".
    pub async fn drop_filter(&self, filter: &str, keys: DropKeys) -> Result<FilterDropped, Error> {
        self.call(self.request(Method::DELETE, &paths::filter(filter)).query(&[("keys", keys.as_str())])).await
    }

    /// A filter's state and health.
    pub async fn stats(&self, filter: &str) -> Result<FilterStats, Error> {
        self.call(self.request(Method::GET, &paths::stats(filter))).await
    }

    /// Looks one key up. "Not seen" is an answer (a 404 with a [`KeyAnswer`]), not an error; a
    /// filter that does not exist is an error (a 404 with a [`Problem`](crate::api::Problem)).
    pub async fn lookup(&self, filter: &str, key: &str) -> Result<KeyAnswer, Error> {
        let response = self.exchange(self.build(self.request(Method::GET, &paths::key(filter, key)))?).await?;
        if response.status() == StatusCode::NOT_FOUND && !is_problem(&response) {
            return self.parse(response).await;
        }
        self.answer(response).await
    }

    /// Looks one key up with `HEAD`: whether it is stored and who answered, without a body.
    pub async fn exists(&self, filter: &str, key: &str) -> Result<Presence, Error> {
        let response = self.exchange(self.build(self.request(Method::HEAD, &paths::key(filter, key)))?).await?;
        let status = response.status();
        let seen = match status {
            StatusCode::OK => true,
            StatusCode::NOT_FOUND if !is_problem(&response) => false,
            _ => return Err(self.error(response).await),
        };
        let by = response.headers().get(headers::ANSWERED_BY).and_then(|v| v.to_str().ok());
        let answered_by = by.and_then(AnsweredBy::parse).ok_or_else(|| Error::Decode {
            status: status.as_u16(),
            detail: format!("no valid {} header: {by:?}", headers::ANSWERED_BY),
        })?;
        Ok(Presence { seen, answered_by })
    }

    /// Stores one key with `value` (may be empty). Storing a stored key again is not an error.
    pub async fn insert(&self, filter: &str, key: &str, value: &[u8]) -> Result<KeyStored, Error> {
        let request = self
            .request(Method::PUT, &paths::key(filter, key))
            .header(headers::CONTENT_TYPE, media::OCTET_STREAM)
            .body(value.to_vec());
        self.call(request).await
    }

    /// Deletes one key; `deleted` says whether it was stored.
    pub async fn delete(&self, filter: &str, key: &str) -> Result<KeyDeleted, Error> {
        self.call(self.request(Method::DELETE, &paths::key(filter, key))).await
    }

    /// Starts an online rebuild, optionally resizing; 409 (an error) if one runs.
    pub async fn rebuild(&self, filter: &str, rebuild: &Rebuild) -> Result<RebuildStarted, Error> {
        self.call(self.request(Method::POST, &paths::rebuild(filter)).json(rebuild)).await
    }

    /// Posts `body` as JSON to `path`; the call's type.
    async fn post_json<T: DeserializeOwned>(&self, path: &str, body: &impl Serialize) -> Result<T, Error> {
        self.call(self.request(Method::POST, path).json(body)).await
    }

    fn request(&self, method: Method, path: &str) -> RequestBuilder {
        let request = self.http.request(method, format!("{}{path}", self.base));
        match &self.token {
            Some(token) => request.bearer_auth(token),
            None => request,
        }
    }

    /// The request, built once: each try sends a copy (its body is shared, not copied).
    fn build(&self, request: RequestBuilder) -> Result<Request, Error> {
        // The base was checked and every path segment is escaped, so this fails only for a
        // body that does not serialize, which the API's bodies always do.
        request.build().map_err(|e| Error::InvalidUrl { url: self.base.to_string(), reason: e.to_string() })
    }

    /// Sends `request` and reads the call's type from its answer.
    async fn call<T: DeserializeOwned>(&self, request: RequestBuilder) -> Result<T, Error> {
        let response = self.exchange(self.build(request)?).await?;
        self.answer(response).await
    }

    /// Sends `request`, tried again as the retry policy says; the last answer, whatever its
    /// status, or the last failure to get one.
    async fn exchange(&self, request: Request) -> Result<Response, Error> {
        let Some(policy) = &self.retries else { return self.send(request).await };
        let (mut tries, mut waited) = (1, Duration::ZERO);
        loop {
            // Every body here is bytes in memory, so a copy is always possible.
            let Some(attempt) = request.try_clone() else { return self.send(request).await };
            let outcome = self.send(attempt).await;
            let retry_after = match &outcome {
                Ok(response) if is_retryable(response.status()) => retry_after(response.headers()),
                Err(e) if e.is_retryable() => None,
                _ => return outcome,
            };
            tries += 1;
            let Some(wait) = policy.wait_before(tries, retry_after, waited) else { return outcome };
            drop(outcome);
            tokio::time::sleep(wait).await;
            waited += wait;
        }
    }

    async fn send(&self, request: Request) -> Result<Response, Error> {
        self.http.execute(request).await.map_err(|e| self.transport(e))
    }

    fn transport(&self, error: reqwest::Error) -> Error {
        Error::transport(&self.base, error, self.timeouts)
    }

    /// The call's type from a success, else the error answer.
    async fn answer<T: DeserializeOwned>(&self, response: Response) -> Result<T, Error> {
        if response.status().is_success() {
            return self.parse(response).await;
        }
        Err(self.error(response).await)
    }

    /// An error answer, with its problem body when it has one.
    async fn error(&self, response: Response) -> Error {
        let status = response.status().as_u16();
        let retry_after = retry_after(response.headers());
        match response.text().await {
            Ok(body) => Error::http(status, &body, retry_after),
            Err(e) => self.transport(e),
        }
    }

    async fn parse<T: DeserializeOwned>(&self, response: Response) -> Result<T, Error> {
        let status = response.status().as_u16();
        let bytes = response.bytes().await.map_err(|e| self.transport(e))?;
        serde_json::from_slice(&bytes).map_err(|e| Error::Decode { status, detail: e.to_string() })
    }
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the token.
        f.debug_struct("Client")
            .field("base", &self.base)
            .field("token", &self.token.as_ref().map(|_| "(set)"))
            .field("timeouts", &self.timeouts)
            .field("max_batch", &self.max_batch())
            .field("retries", &self.retries)
            .finish()
    }
}

/// Statuses worth another try: overload and the server's own failures.
fn is_retryable(status: StatusCode) -> bool {
    status == StatusCode::TOO_MANY_REQUESTS || status.is_server_error()
}

fn is_problem(response: &Response) -> bool {
    let content_type = response.headers().get(headers::CONTENT_TYPE).and_then(|v| v.to_str().ok());
    content_type.is_some_and(media::is_problem)
}

/// The wait a `Retry-After` header asks for, in its seconds form (bloomgate's).
fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    let value = headers.get(headers::RETRY_AFTER)?.to_str().ok()?;
    headers::retry_after_secs(value).map(Duration::from_secs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_escaped_as_one_path_segment() {
        let client = Client::new("http://origin:8080/").unwrap();
        let request = client.request(Method::GET, &paths::key("f", "a/b c%d?é")).build().unwrap();
        assert_eq!(request.url().as_str(), "http://origin:8080/v1/filters/f/keys/a%2Fb%20c%25d%3F%C3%A9");
    }

    #[test]
    fn a_path_prefix_is_kept_before_every_path() {
        let client = Client::new("https://example.com/bloomgate/").unwrap();
        let request = client.request(Method::GET, &paths::stats("f")).build().unwrap();
        assert_eq!(request.url().as_str(), "https://example.com/bloomgate/v1/filters/f/stats");
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

    #[test]
    fn a_retrying_client_shares_its_settings() {
        let client = Client::builder("http://origin").max_batch(7).build().unwrap();
        let retrying = client.with_retries(RetryPolicy::default().attempts(2));
        assert_eq!((retrying.base(), retrying.max_batch()), ("http://origin", 7));
        assert!(client.retries.is_none() && retrying.retries.is_some());
    }
}
