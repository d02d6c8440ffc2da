//! What a call that did not give its answer says: one error type whose variants name what
//! failed (the settings, the connection, TLS, a timeout, the server's answer), each message
//! saying what to do about it. The HTTP library stays inside: its errors are sorted here, once.

use crate::api::{BatchKeysError, Problem};
use std::error::Error as StdError;
use std::time::Duration;

/// Longest part of a non-problem error body kept in [`Error::Http`] (a proxy's HTML page can
/// be long; the start says what it is).
const BODY_KEPT: usize = 1024;

/// A call that did not give its answer, or a client that could not be built.
///
/// [`Error::is_retryable`] says whether the same call may succeed later.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The server URL cannot name a bloomgate server (see [`Client::builder`](crate::Client::builder)).
    #[error("invalid server URL {url:?}: {reason}")]
    InvalidUrl {
        /// The URL as given.
        url: String,
        /// What is wrong with it, and how to write it.
        reason: String,
    },
    /// Extra CA certificates could not be read, or do not hold a certificate.
    #[error("cannot trust the CA certificates from {from}: {reason}")]
    InvalidCa {
        /// Where they came from: a file's path, or "the PEM bytes given".
        from: String,
        /// What was wrong: the file could not be read, is not PEM, or holds no certificate.
        reason: String,
    },
    /// The token cannot be sent in an `Authorization` header.
    #[error("invalid token: {reason}")]
    InvalidToken {
        /// What a header cannot carry in it (spaces, control characters, non-ASCII), or that it
        /// is empty.
        reason: String,
    },
    /// No connection: refused, host unknown, network unreachable.
    #[error(
        "cannot connect to {url}: {cause}; check that the server is running and that the URL's host and port are right"
    )]
    Connect {
        /// The server's base URL.
        url: String,
        /// The innermost cause, as the system or the resolver put it.
        cause: String,
    },
    /// The TLS handshake failed: the server's certificate is not trusted or not for this host,
    /// or the server does not speak TLS on this port.
    #[error("TLS handshake with {url} failed: {cause}; {hint}")]
    Tls {
        /// The server's base URL.
        url: String,
        /// What TLS reported.
        cause: String,
        /// What to do about it.
        hint: &'static str,
    },
    /// No answer within a timeout: connecting took longer than the connect timeout, or the
    /// whole call longer than the request timeout.
    #[error("no answer from {url} within {after:?}; the server may be overloaded or unreachable: try again, or allow longer (ClientBuilder::timeout, ClientBuilder::connect_timeout)")]
    Timeout {
        /// The server's base URL.
        url: String,
        /// The timeout that ran out.
        after: Duration,
    },
    /// The connection broke before the answer was read, or what came back is not HTTP.
    #[error("the exchange with {url} broke off: {cause}; {}", connection_hint(url))]
    Connection {
        /// The server's base URL.
        url: String,
        /// The innermost cause.
        cause: String,
    },
    /// The server answered with an error status.
    #[error("the server answered {status}: {}", answer_words(problem.as_deref(), body, *retry_after))]
    Http {
        /// The HTTP status.
        status: u16,
        /// The problem details (`detail`, and `hint` when the server has advice), when the body
        /// was one: bloomgate's origin and edge always send one. (Boxed: it is the largest part
        /// of an error that every call's `Result` carries.)
        problem: Option<Box<Problem>>,
        /// The body as text (its first kilobyte), for answers from something else on the way
        /// (a proxy's error page).
        body: String,
        /// How long the server asked to wait (`Retry-After`, on 429 and 503).
        retry_after: Option<Duration>,
    },
    /// An answer that is not the call's type.
    #[error(
        "unexpected answer from the server ({status}): {detail}; check that the URL names a bloomgate origin or edge"
    )]
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
            Error::Http { status, .. } | Error::Decode { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// The problem body of an error answer, when it had one.
    pub fn problem(&self) -> Option<&Problem> {
        match self {
            Error::Http { problem, .. } => problem.as_deref(),
            _ => None,
        }
    }

    /// Whether the same call may succeed later: overload (429), the server or its stores (5xx),
    /// no connection, a timeout, a connection that broke. Settings, TLS and other 4xx answers
    /// are the caller's to fix.
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::Http { status, .. } => *status == 429 || *status >= 500,
            Error::Connect { .. } | Error::Timeout { .. } | Error::Connection { .. } => true,
            _ => false,
        }
    }

    /// How long the server asked to wait before trying again.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Error::Http { retry_after, .. } => *retry_after,
            _ => None,
        }
    }

    /// The server's `max_batch`, when this is its refusal of a batch over it (413).
    pub(crate) fn batch_limit(&self) -> Option<usize> {
        match self {
            Error::Http { status: 413, problem: Some(problem), .. } => {
                BatchKeysError::limit_in_too_many_detail(&problem.detail)
            }
            _ => None,
        }
    }

    /// An error answer: its status, its body (a problem when it parses as one).
    pub(crate) fn http(status: u16, body: &str, retry_after: Option<Duration>) -> Error {
        let problem = serde_json::from_str(body).ok().map(Box::new);
        let mut end = body.len().min(BODY_KEPT);
        while !body.is_char_boundary(end) {
            end -= 1;
        }
        Error::Http { status, problem, body: body[..end].to_owned(), retry_after }
    }

    /// A request that got no answer, sorted by what failed. `url` is the server's base URL;
    /// `timeouts` are the client's (connect, request), to say which one ran out.
    pub(crate) fn transport(url: &str, error: reqwest::Error, timeouts: (Duration, Duration)) -> Error {
        let url = url.to_owned();
        if error.is_timeout() {
            let after = if error.is_connect() { timeouts.0 } else { timeouts.1 };
            return Error::Timeout { url, after };
        }
        if let Some(tls) = tls_error(&error) {
            return Error::Tls { url, cause: tls.to_string(), hint: tls_hint(tls) };
        }
        let cause = innermost(&error);
        match error.is_connect() {
            true => Error::Connect { url, cause },
            false => Error::Connection { url, cause },
        }
    }
}

/// What an error answer says: the problem's detail and hint, or the start of the body.
fn answer_words(problem: Option<&Problem>, body: &str, retry_after: Option<Duration>) -> String {
    let mut words = match problem {
        Some(Problem { detail, hint: Some(hint), .. }) => format!("{}. {hint}", detail.trim_end_matches('.')),
        Some(Problem { detail, .. }) => detail.clone(),
        None if body.trim().is_empty() => "(no body)".to_owned(),
        None => body.trim().to_owned(),
    };
    if let Some(wait) = retry_after {
        words.push_str(&format!(" (it asked to wait {} s before trying again)", wait.as_secs()));
    }
    words
}

/// What to do when a connection broke: a plain-HTTP URL may be aimed at a TLS port.
fn connection_hint(url: &str) -> &'static str {
    match url.starts_with("http://") {
        true => "if the server serves HTTPS on this port, use an https:// URL; otherwise try again",
        false => "the server may have restarted or a proxy closed the connection: try again",
    }
}

/// What to do about a failed handshake, by what TLS reported.
fn tls_hint(error: &rustls::Error) -> &'static str {
    match error {
        rustls::Error::InvalidCertificate(_) | rustls::Error::NoCertificatesPresented => {
            "if the server's certificate is signed by a CA of your own, trust it with \
             ClientBuilder::ca_file (the CLI's --ca-file or BLOOMGATE_CA_FILE), and check that the \
             URL's host is a name on the certificate"
        }
        rustls::Error::InvalidMessage(_) | rustls::Error::InappropriateMessage { .. } => {
            "the server does not seem to speak TLS on this port: for a plain-HTTP server use an http:// URL"
        }
        _ => "check the server's TLS settings (versions, ciphers, certificate)",
    }
}

/// The rustls error in an error's chain of causes.
fn tls_error<'a>(error: &'a (dyn StdError + 'static)) -> Option<&'a rustls::Error> {
    causes(error).find_map(|cause| cause.downcast_ref::<rustls::Error>())
}

/// The last cause in an error's chain: the most specific words ("Connection refused",
/// "invalid peer certificate: UnknownIssuer").
fn innermost(error: &(dyn StdError + 'static)) -> String {
    causes(error).last().map(ToString::to_string).unwrap_or_default()
}

/// An error and its causes, outermost first. An `io::Error` that wraps another error is
/// opened by `get_ref`: its `source()` skips the error it wraps (it answers that error's own
/// source), and TLS streams wrap rustls's errors in an `io::Error`, itself wrapped in another.
fn causes<'a>(error: &'a (dyn StdError + 'static)) -> impl Iterator<Item = &'a (dyn StdError + 'static)> {
    std::iter::successors(Some(error), |&error: &&'a (dyn StdError + 'static)| {
        match error.downcast_ref::<std::io::Error>().and_then(|io| io.get_ref()) {
            Some(wrapped) => Some(wrapped as &(dyn StdError + 'static)),
            None => error.source(),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn http(status: u16) -> Error {
        Error::http(status, "", None)
    }

    #[test]
    fn only_overload_the_stores_and_silence_are_worth_a_retry() {
        assert!(http(429).is_retryable() && http(503).is_retryable() && http(502).is_retryable());
        assert!(!http(400).is_retryable() && !http(404).is_retryable() && !http(409).is_retryable());
        let url = || "https://origin".to_owned();
        assert!(Error::Connect { url: url(), cause: "refused".into() }.is_retryable());
        assert!(Error::Timeout { url: url(), after: Duration::from_secs(1) }.is_retryable());
        assert!(!Error::Tls { url: url(), cause: "bad".into(), hint: "" }.is_retryable());
        assert!(!Error::InvalidUrl { url: url(), reason: "bad".into() }.is_retryable());
    }

    #[test]
    fn an_error_answer_says_the_problem_and_what_to_do() {
        let body = r#"{"detail":"no filter named \"f\"","hint":"Create it first.","status":404,"title":"Not Found","type":"about:blank"}"#;
        let err = Error::http(404, body, None);
        assert_eq!(err.to_string(), "the server answered 404: no filter named \"f\". Create it first.");
        assert_eq!(err.problem().map(|p| p.status), Some(404));
        let busy = Error::http(429, "", Some(Duration::from_secs(2)));
        assert_eq!(busy.to_string(), "the server answered 429: (no body) (it asked to wait 2 s before trying again)");
        assert_eq!(busy.retry_after(), Some(Duration::from_secs(2)));
    }

    #[test]
    fn a_long_body_that_is_not_a_problem_is_cut_at_a_character() {
        let page = "é".repeat(BODY_KEPT);
        let Error::Http { problem: None, body, .. } = Error::http(502, &page, None) else { panic!("an Http error") };
        assert!(body.len() <= BODY_KEPT && body.len() > BODY_KEPT - 2, "{}", body.len());
    }

    #[test]
    fn the_server_s_batch_limit_is_read_from_its_refusal() {
        let refusal = crate::api::Problem::new(413, BatchKeysError::too_many_detail(3, 7));
        assert_eq!(Error::http(413, &refusal.to_json(), None).batch_limit(), Some(3));
        let body_too_large = crate::api::Problem::new(413, "body over the limit");
        assert_eq!(Error::http(413, &body_too_large.to_json(), None).batch_limit(), None);
    }

    #[test]
    fn a_tls_error_is_found_inside_io_errors_inside_io_errors() {
        // As the connector hands it over: io::Error(Other, io::Error(InvalidData, rustls::Error)).
        let tls = rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer);
        let io = std::io::Error::other(std::io::Error::new(std::io::ErrorKind::InvalidData, tls));
        assert!(matches!(tls_error(&io), Some(rustls::Error::InvalidCertificate(_))));
        assert!(tls_hint(tls_error(&io).unwrap()).contains("ca_file"));
        assert_eq!(innermost(&io), "invalid peer certificate: UnknownIssuer");
        assert!(tls_error(&std::io::Error::other("refused")).is_none());
        assert_eq!(innermost(&std::io::Error::from(std::io::ErrorKind::ConnectionRefused)), "connection refused");
    }

    #[test]
    fn a_plain_http_url_that_broke_off_suggests_https() {
        let plain = Error::Connection { url: "http://127.0.0.1:8443".into(), cause: "closed".into() };
        assert!(plain.to_string().contains("use an https:// URL"), "{plain}");
        let tls = Error::Connection { url: "https://127.0.0.1:8443".into(), cause: "closed".into() };
        assert!(!tls.to_string().contains("https:// URL"), "{tls}");
    }
}
