//! How a client is made: the server's URL, a token, CA certificates to trust beside the
//! platform's, timeouts, the batch size; each with a default that suits a bloomgate origin.

use super::{base_url, Client, Error};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use std::time::Duration;

/// How long connecting (TCP and TLS) may take by default: 5 s.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a whole request may take by default, answer read included: 30 s.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// Keys per batch request by default: the origin's default `max_batch`, 1000.
pub const DEFAULT_MAX_BATCH: usize = 1000;
/// How long an idle connection is kept for reuse by default: 20 s. The origin closes an idle
/// keep-alive connection after its header-read timeout (30 s by default); a client that kept
/// one longer would sometimes send on a connection the server is closing.
pub const DEFAULT_POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(20);

/// Settings for a [`Client`], from [`Client::builder`]; [`build`](Self::build) checks them.
#[must_use = "a builder does nothing until `build` is called"]
pub struct ClientBuilder {
    url: String,
    token: Option<String>,
    roots: Vec<Root>,
    connect_timeout: Duration,
    timeout: Duration,
    pool_idle_timeout: Duration,
    max_batch: usize,
}

/// CA certificates to trust beside the platform's.
enum Root {
    File(PathBuf),
    Pem(Vec<u8>),
}

impl ClientBuilder {
    pub(super) fn new(url: &str) -> ClientBuilder {
        ClientBuilder {
            url: url.to_owned(),
            token: None,
            roots: Vec::new(),
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            timeout: DEFAULT_TIMEOUT,
            pool_idle_timeout: DEFAULT_POOL_IDLE_TIMEOUT,
            max_batch: DEFAULT_MAX_BATCH,
        }
    }

    /// A bearer token for every call: a writer token (writes, creates, drops, rebuilds, and
    /// every read), or an ops token (stats and the filter list only). Lookups need none.
    pub fn token(mut self, token: impl Into<String>) -> ClientBuilder {
        self.token = Some(token.into());
        self
    }

    /// Also trust the CA certificates in the PEM file at `path` (read by
    /// [`build`](Self::build)), for a server whose certificate a private CA signed.
    pub fn ca_file(mut self, path: impl AsRef<Path>) -> ClientBuilder {
        self.roots.push(Root::File(path.as_ref().to_owned()));
        self
    }

    /// Also trust the CA certificates in `pem` (one or more `-----BEGIN CERTIFICATE-----`
    /// blocks).
    pub fn add_root_pem(mut self, pem: impl Into<Vec<u8>>) -> ClientBuilder {
        self.roots.push(Root::Pem(pem.into()));
        self
    }

    /// How long connecting (TCP, and TLS for https) may take; [`DEFAULT_CONNECT_TIMEOUT`] if
    /// not set.
    pub fn connect_timeout(mut self, timeout: Duration) -> ClientBuilder {
        self.connect_timeout = timeout;
        self
    }

    /// How long a whole request may take, from connecting to the answer's last byte;
    /// [`DEFAULT_TIMEOUT`] if not set. Each try of a retried request has this long.
    pub fn timeout(mut self, timeout: Duration) -> ClientBuilder {
        self.timeout = timeout;
        self
    }

    /// How long an idle connection is kept for reuse; [`DEFAULT_POOL_IDLE_TIMEOUT`] if not set.
    /// Keep it below the time the server (or a proxy in front of it) closes idle connections
    /// after, so that a request is never sent on a connection being closed.
    pub fn pool_idle_timeout(mut self, idle: Duration) -> ClientBuilder {
        self.pool_idle_timeout = idle;
        self
    }

    /// Keys per batch request: set it to the server's `max_batch` when that is below
    /// [`DEFAULT_MAX_BATCH`] (0 is taken as 1). A server that refuses a batch as too large
    /// names its limit, and the client lowers this to it and sends the batch again split.
    pub fn max_batch(mut self, keys: usize) -> ClientBuilder {
        self.max_batch = keys.max(1);
        self
    }

    /// The client, or why these settings cannot make one: the URL (see [`Client::builder`]),
    /// a CA file that cannot be read or holds no certificate, a token with characters a header
    /// cannot carry.
    pub fn build(self) -> Result<Client, Error> {
        let base = base_url::parse(&self.url)?;
        if let Some(token) = &self.token {
            check_token(token)?;
        }
        let mut http = reqwest::Client::builder()
            .connect_timeout(self.connect_timeout)
            .timeout(self.timeout)
            .pool_idle_timeout(self.pool_idle_timeout)
            .user_agent(concat!("bloomgate-client/", env!("CARGO_PKG_VERSION")));
        let given_roots = !self.roots.is_empty();
        for root in self.roots {
            for certificate in certificates(root)? {
                http = http.add_root_certificate(certificate);
            }
        }
        let http = http.build().map_err(|e| Error::InvalidCa {
            from: match given_roots {
                true => "the platform's store and the certificates given".to_owned(),
                false => "the platform's store".to_owned(),
            },
            reason: e.to_string(),
        })?;
        Ok(Client {
            base: base.into(),
            http,
            token: self.token.map(Into::into),
            timeouts: (self.connect_timeout, self.timeout),
            max_batch: Arc::new(AtomicUsize::new(self.max_batch)),
            retries: None,
        })
    }
}

impl std::fmt::Debug for ClientBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the token.
        f.debug_struct("ClientBuilder")
            .field("url", &self.url)
            .field("token", &self.token.as_ref().map(|_| "(set)"))
            .field("roots", &self.roots.len())
            .field("connect_timeout", &self.connect_timeout)
            .field("timeout", &self.timeout)
            .field("pool_idle_timeout", &self.pool_idle_timeout)
            .field("max_batch", &self.max_batch)
            .finish()
    }
}

/// The certificates of one root source.
fn certificates(root: Root) -> Result<Vec<reqwest::Certificate>, Error> {
    let (from, pem) = match root {
        Root::File(path) => {
            let from = path.display().to_string();
            let pem = std::fs::read(&path)
                .map_err(|e| Error::InvalidCa { from: from.clone(), reason: format!("cannot read it: {e}") })?;
            (from, pem)
        }
        Root::Pem(pem) => ("the PEM bytes given".to_owned(), pem),
    };
    let refuse = |reason: String| Error::InvalidCa { from: from.clone(), reason };
    let certificates = reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| refuse(format!("not PEM: {e}")))?;
    if certificates.is_empty() {
        return Err(refuse("it holds no certificate (no -----BEGIN CERTIFICATE----- block)".to_owned()));
    }
    Ok(certificates)
}

/// A token an `Authorization: Bearer` header can carry: visible ASCII, no spaces.
fn check_token(token: &str) -> Result<(), Error> {
    if token.is_empty() {
        return Err(Error::InvalidToken { reason: "it is empty".to_owned() });
    }
    match token.bytes().all(|b| b.is_ascii_graphic()) {
        true => Ok(()),
        false => Err(Error::InvalidToken {
            reason: "it has spaces, control characters or non-ASCII; a bearer token is visible ASCII only".to_owned(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ca_file_that_is_missing_or_holds_no_certificate_is_named() {
        let missing = Client::builder("https://origin").ca_file("/nonexistent/ca.pem").build().unwrap_err();
        assert!(matches!(missing, Error::InvalidCa { .. }), "{missing:?}");
        assert!(missing.to_string().contains("/nonexistent/ca.pem") && missing.to_string().contains("cannot read"));
        let empty = Client::builder("https://origin").add_root_pem("not a certificate").build().unwrap_err();
        assert!(empty.to_string().contains("holds no certificate"), "{empty}");
    }

    #[test]
    fn a_token_a_header_cannot_carry_is_refused_and_never_printed() {
        let err = Client::builder("http://origin").token("two words").build().unwrap_err();
        assert!(matches!(err, Error::InvalidToken { .. }), "{err:?}");
        let builder = Client::builder("http://origin").token("secret-token-0123456789");
        assert!(!format!("{builder:?}").contains("secret"), "{builder:?}");
        let client = builder.build().unwrap();
        assert!(!format!("{client:?}").contains("secret"), "{client:?}");
    }

    #[test]
    fn defaults_are_the_documented_ones() {
        let client = Client::builder("http://origin").build().unwrap();
        assert_eq!(client.timeouts, (Duration::from_secs(5), Duration::from_secs(30)));
        assert_eq!(client.max_batch(), 1000);
        assert_eq!(Client::builder("http://origin").max_batch(0).build().unwrap().max_batch(), 1);
    }
}
