//! Subrequests to the origin (wasm32 only), each under a timeout that covers the body too, and
//! aborted when it runs out: a slow origin costs a bounded wait, then a forward or a 503.
//!
//! Forwarded lookups relay the origin's answers and refusals as they are (400, 413, 429 with
//! its Retry-After: [`answer::judge_origin_answer`]); an answer that is not bloomgate's (no
//! `x-bloomgate-answered-by`, no problem body) is a 502; no answer, a timeout or a 5xx is a 503
//! with Retry-After, never "no".

use crate::answer::{self, OriginAnswer};
use crate::config::EdgeConfig;
use crate::decide::ORIGIN_TIMEOUT_CAP_MS;
use bloomgate_client::api::{Keys, Lookups};
use bloomgate_client::{headers, media, paths};
use std::fmt;
use std::future::{poll_fn, Future};
use std::pin::pin;
use std::task::Poll;
use std::time::Duration;
use worker::{AbortController, CfProperties, Delay, Fetch, Headers, Method, Request, RequestInit, Response, Result};

/// The origin's answer, read whole.
pub(crate) struct Reply {
    pub status: u16,
    pub headers: Headers,
    pub body: Vec<u8>,
}

/// Why the origin gave no answer.
pub(crate) enum Failure {
    TimedOut(u32),
    Fetch(worker::Error),
    /// The answer declared no length, or more than the caller reads (the limit): not read.
    TooLarge(usize),
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::TimedOut(ms) => write!(f, "no answer within {ms} ms: aborted"),
            Self::Fetch(e) => write!(f, "{e}"),
            Self::TooLarge(max) => write!(f, "answer over {max} bytes (or of no declared length): not read"),
        }
    }
}

/// `fut`'s output, or None if `ms` pass first (the future is then dropped).
async fn within<T>(ms: u32, fut: impl Future<Output = T>) -> Option<T> {
    let mut fut = pin!(fut);
    let mut timer = pin!(Delay::from(Duration::from_millis(u64::from(ms))));
    poll_fn(|cx| {
        if let Poll::Ready(out) = fut.as_mut().poll(cx) {
            return Poll::Ready(Some(out));
        }
        timer.as_mut().poll(cx).map(|()| None)
    })
    .await
}

/// Where a subrequest's answer goes: the most body bytes read (a body over it, or of no
/// declared length, is not read), and the buffer it is read into, given its exact length.
pub(crate) struct Sink<B: FnOnce(usize) -> Vec<u8>> {
    pub max_body: Option<usize>,
    pub buffer: B,
}

/// Any body, into a buffer of its size.
pub(crate) fn any_body() -> Sink<fn(usize) -> Vec<u8>> {
    Sink { max_body: None, buffer: Vec::with_capacity }
}

/// One subrequest, answer and body within `timeout_ms`; aborted past it, or as soon as the
/// answer's declared length is over the sink's `max_body`.
async fn call<B: FnOnce(usize) -> Vec<u8>>(
    method: Method,
    url: &str,
    headers: Headers,
    body: Option<String>,
    timeout_ms: u32,
    sink: Sink<B>,
) -> std::result::Result<Reply, Failure> {
    call_via(method, url, headers, body, None, timeout_ms, sink).await
}

/// [`call`], with the CDN cache options `cf` (the shared feed's).
async fn call_via<B: FnOnce(usize) -> Vec<u8>>(
    method: Method,
    url: &str,
    headers: Headers,
    body: Option<String>,
    cf: Option<CfProperties>,
    timeout_ms: u32,
    sink: Sink<B>,
) -> std::result::Result<Reply, Failure> {
    let controller = AbortController::default();
    let signal = controller.signal();
    let exchange = async {
        let mut init = RequestInit::new();
        init.with_method(method).with_headers(headers);
        if let Some(body) = body {
            init.with_body(Some(body.into()));
        }
        if let Some(cf) = cf {
            init.with_cf_properties(cf);
        }
        let response = Fetch::Request(Request::new_with_init(url, &init)?).send_with_signal(&signal).await?;
        if let Some(max) = sink.max_body {
            let declared = response.headers().get("content-length")?.and_then(|v| v.trim().parse::<usize>().ok());
            if declared.is_none_or(|len| len > max) {
                return Ok(Err(max));
            }
        }
        let (status, headers) = (response.status_code(), response.headers().clone());
        let body = crate::body::read_exact(response, sink.buffer).await?;
        Ok::<_, worker::Error>(Ok(Reply { status, headers, body }))
    };
    match within(timeout_ms, exchange).await {
        Some(Ok(Ok(reply))) => Ok(reply),
        Some(Ok(Err(max))) => {
            controller.abort();
            Err(Failure::TooLarge(max))
        }
        Some(Err(e)) => Err(Failure::Fetch(e)),
        None => {
            controller.abort();
            Err(Failure::TimedOut(timeout_ms))
        }
    }
}

/// GET of an edge endpoint (manifest, segment, journal) with the edge secret, within
/// `timeout_ms`, its body into `sink`.
pub(crate) async fn edge_get<B: FnOnce(usize) -> Vec<u8>>(
    config: &EdgeConfig,
    url: &str,
    timeout_ms: u32,
    sink: Sink<B>,
) -> std::result::Result<Reply, Failure> {
    let sent = Headers::new();
    sent.set(headers::EDGE_SECRET, &config.edge_secret).map_err(Failure::Fetch)?;
    call(Method::Get, url, sent, None, timeout_ms, sink).await
}

/// GET of a shared feed URL (no secret: its path carries the token) through the CDN's cache:
/// cached as the origin's `Cache-Control` says (immutable pages and segments, a current
/// document for its slot), refusals never (a 404 for a wrong token, a 425 for a chunk not
/// sealed yet are each asked again). Only these requests get cache options.
pub(crate) async fn feed_get(url: &str, timeout_ms: u32) -> std::result::Result<Reply, Failure> {
    let cf = CfProperties {
        cache_everything: Some(true),
        cache_ttl_by_status: Some([("400-599".to_owned(), -1)].into_iter().collect()),
        ..CfProperties::default()
    };
    call_via(Method::Get, url, Headers::new(), None, Some(cf), timeout_ms, any_body()).await
}

/// Forwards a lookup (GET or HEAD, same path and query) to the origin and relays its answer.
pub(crate) async fn forward(config: &EdgeConfig, req: &Request) -> Result<Response> {
    let url = req.url()?;
    let path_and_query = match url.query() {
        Some(q) => format!("{}?{q}", url.path()),
        None => url.path().to_owned(),
    };
    let target = answer::origin_url(&config.origin_url, &path_and_query);
    match call(req.method(), &target, Headers::new(), None, ORIGIN_TIMEOUT_CAP_MS, any_body()).await {
        Ok(reply) => match judge(&reply) {
            OriginAnswer::Relay => relay(reply),
            OriginAnswer::NotBloomgate => not_bloomgate(&target, &reply),
            OriginAnswer::Unavailable => {
                worker::console_error!("forward {target}: origin answered {}", reply.status);
                unavailable()
            }
        },
        Err(e) => {
            worker::console_error!("forward {target}: {e}");
            unavailable()
        }
    }
}

/// What came of forwarding a batch.
pub(crate) enum BatchForward {
    /// The origin answered for every key.
    Answered(Lookups),
    /// The origin refused the batch, or could not be asked: this response goes to the client.
    Refused(Response),
}

/// Asks the origin about `keys` with one batch lookup.
pub(crate) async fn forward_batch(config: &EdgeConfig, filter: &str, keys: Vec<String>) -> Result<BatchForward> {
    let url = format!("{}{}", config.origin_url, paths::lookups(filter));
    let sent = Headers::new();
    sent.set(headers::CONTENT_TYPE, media::JSON)?;
    let asked = keys.len();
    let body = serde_json::to_string(&Keys { keys }).map_err(|e| worker::Error::RustError(e.to_string()))?;
    let reply = match call(Method::Post, &url, sent, Some(body), ORIGIN_TIMEOUT_CAP_MS, any_body()).await {
        Ok(reply) => reply,
        Err(e) => {
            worker::console_error!("batch {url}: {e}");
            return unavailable().map(BatchForward::Refused);
        }
    };
    match reply.status {
        200 => match serde_json::from_slice::<Lookups>(&reply.body) {
            Ok(answers) if answers.results.len() == asked => Ok(BatchForward::Answered(answers)),
            _ => {
                worker::console_error!("batch {url}: the origin's answer does not match the {asked} keys asked");
                unavailable().map(BatchForward::Refused)
            }
        },
        status => match judge(&reply) {
            // A 200 is a batch answer, read above; a relayed batch answer is a refusal.
            OriginAnswer::Relay if status != 200 => relay(reply).map(BatchForward::Refused),
            OriginAnswer::Relay | OriginAnswer::NotBloomgate => not_bloomgate(&url, &reply).map(BatchForward::Refused),
            OriginAnswer::Unavailable => {
                worker::console_error!("batch {url}: origin answered {status}");
                unavailable().map(BatchForward::Refused)
            }
        },
    }
}

/// What the origin's `reply` is (see [`answer::judge_origin_answer`]).
pub(crate) fn judge(reply: &Reply) -> OriginAnswer {
    let header = |name| reply.headers.get(name).ok().flatten();
    answer::judge_origin_answer(
        reply.status,
        header(headers::ANSWERED_BY).as_deref(),
        header(headers::CONTENT_TYPE).as_deref(),
    )
}

/// 502: what answered at `url` is not bloomgate's origin.
fn not_bloomgate(url: &str, reply: &Reply) -> Result<Response> {
    worker::console_error!("{url}: answered {} without bloomgate's headers: check ORIGIN_URL", reply.status);
    let r = Response::from_json(&answer::not_bloomgate(reply.status))?.with_status(502);
    r.headers().set(headers::CONTENT_TYPE, media::PROBLEM_JSON)?;
    Ok(r)
}

/// The origin's answer passed on: its status, body and the headers [`answer::relayed_headers`]
/// picks.
fn relay(reply: Reply) -> Result<Response> {
    let relayed = Headers::new();
    for (name, value) in answer::relayed_headers(|name| reply.headers.get(name).ok().flatten()) {
        relayed.set(name, &value)?;
    }
    Ok(Response::from_bytes(reply.body)?.with_status(reply.status).with_headers(relayed))
}

/// 503 + Retry-After: the answer is unknown, never "not seen".
pub(crate) fn unavailable() -> Result<Response> {
    let r = Response::from_json(&answer::origin_unavailable())?.with_status(503);
    r.headers().set(headers::CONTENT_TYPE, media::PROBLEM_JSON)?;
    r.headers().set(headers::RETRY_AFTER, answer::RETRY_AFTER_SECS)?;
    Ok(r)
}
