//! The layer that admits a request or answers 429 at once: each class of requests has a
//! limiter of its own (so a burst of writes cannot shed lookups), and a request takes its
//! kind's worst case from its class's budget (`Caps::weight`), never waiting for room. A write
//! or batch keeps what it took until its answer's body has been sent, not only until its
//! handler returned: the answer is what holds its memory then, and a client that reads it
//! slowly must not let more in.
//!
//! A refused request's body is read and thrown away before its 429 is sent ([`refuse`]): a
//! server that answers and closes with a body unread makes the kernel reset the connection,
//! and the client reads "connection reset" instead of the 429 and its Retry-After.

use super::caps::Caps;
use super::in_flight::{Entered, EnteredOwned, InFlight};
use crate::error::AppError;
use crate::metrics::{Class, Kind, Metrics};
use axum::body::{Body, Bytes, HttpBody};
use axum::extract::{MatchedPath, Request};
use axum::http::Method;
use axum::response::{IntoResponse, Response};
use bloomgate_client::paths;
use pin_project_lite::pin_project;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The limiters of both classes and what each kind takes from its class.
pub struct Admission {
    /// Lookups never wait: one atomic counter (see `in_flight`).
    lookups: Arc<InFlight>,
    writes_and_batches: Arc<Semaphore>,
    weights: [u32; Kind::ALL.len()],
    metrics: Arc<Metrics>,
    /// The most of a refused request's body read (and discarded) before its 429.
    drain_bytes: usize,
}

/// How long a refused request's body is read before its 429 is sent anyway (the connection then
/// closed): a client sending slowly must not hold the refusal open.
const DRAIN_TIME: std::time::Duration = std::time::Duration::from_secs(2);

impl Admission {
    /// Limiters sized by `caps`, counting refusals into `metrics`; a refused request's body is
    /// read up to `drain_bytes` (the largest body a request may have) before its 429.
    pub fn new(caps: &Caps, metrics: Arc<Metrics>, drain_bytes: usize) -> Arc<Admission> {
        let mut weights = [0; Kind::ALL.len()];
        for (at, kind) in Kind::ALL.iter().enumerate() {
            weights[at] = caps.weight(*kind);
        }
        Arc::new(Admission {
            lookups: Arc::new(InFlight::new(caps.permits(Class::Lookup))),
            writes_and_batches: Arc::new(Semaphore::new(caps.permits(Class::WriteOrBatch))),
            weights,
            metrics,
            drain_bytes,
        })
    }

    /// The layer for a router.
    pub fn layer(self: &Arc<Admission>) -> AdmitLayer {
        AdmitLayer(self.clone())
    }

    /// Room for a request of `kind`, or None (the refusal counted).
    /// A single-key lookup's place in flight, or None (refused: counted) above the lookups'
    /// cap: what the lookup lane asks, which has no layer.
    pub fn admit_lookup(&self) -> Option<Entered<'_>> {
        let entered = self.lookups.enter(self.weight(Kind::Lookup) as usize);
        if entered.is_none() {
            self.metrics.admission.refused(Class::Lookup);
        }
        entered
    }

    /// The answer to a refused request: 429 once its body (up to the drain limit) is read.
    pub async fn refused(&self, body: Body) -> Response {
        refuse(body, self.drain_bytes).await
    }

    fn weight(&self, kind: Kind) -> u32 {
        self.weights[Kind::ALL.iter().position(|k| *k == kind).unwrap_or(0)]
    }

    fn admit(&self, kind: Kind) -> Option<Permit> {
        let class = class_of(kind);
        let weight = self.weight(kind);
        let permit = match class {
            Class::Lookup => self.lookups.enter_owned(weight as usize).map(Permit::Lookup),
            Class::WriteOrBatch => {
                self.writes_and_batches.clone().try_acquire_many_owned(weight).ok().map(Permit::WriteOrBatch)
            }
        };
        if permit.is_none() {
            self.metrics.admission.refused(class);
        }
        permit
    }
}

/// A request's place in its class, given back when dropped (held for that alone).
#[derive(Debug)]
#[allow(dead_code)]
enum Permit {
    Lookup(EnteredOwned),
    WriteOrBatch(OwnedSemaphorePermit),
}

/// The class a kind of request is limited in.
pub fn class_of(kind: Kind) -> Class {
    match kind {
        Kind::Lookup => Class::Lookup,
        Kind::BatchLookup | Kind::Write | Kind::BatchWrite | Kind::EdgeFeed => Class::WriteOrBatch,
    }
}

/// The kind of a request, by its method and the route it matched.
pub fn kind_of(method: &Method, route: &str) -> Kind {
    match route {
        paths::KEY if method == Method::GET || method == Method::HEAD => Kind::Lookup,
        paths::LOOKUPS => Kind::BatchLookup,
        paths::KEYS => Kind::BatchWrite,
        paths::MANIFEST | paths::SEGMENT | paths::JOURNAL => Kind::EdgeFeed,
        // Single-key writes and deletes, and the filters' own requests (small bodies).
        _ => Kind::Write,
    }
}

/// The layer: `Router::layer(admission.layer())`.
#[derive(Clone)]
pub struct AdmitLayer(Arc<Admission>);

impl<S> tower::Layer<S> for AdmitLayer {
    type Service = Admit<S>;

    fn layer(&self, inner: S) -> Admit<S> {
        Admit { inner, admission: self.0.clone() }
    }
}

/// A route's service behind the limiters.
#[derive(Clone)]
pub struct Admit<S> {
    inner: S,
    admission: Arc<Admission>,
}

impl<S, B> tower::Service<Request> for Admit<S>
where
    S: tower::Service<Request, Response = axum::http::Response<B>>,
    B: HttpBody<Data = Bytes> + Send + 'static,
    B::Error: Into<axum::BoxError>,
{
    type Response = Response;
    type Error = S::Error;
    type Future = Admitted<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request) -> Self::Future {
        let route = request.extensions().get::<MatchedPath>().map_or("", MatchedPath::as_str);
        let kind = kind_of(request.method(), route);
        match self.admission.admit(kind) {
            Some(permit) => {
                // Lookups' answers are a few KiB, sent at once: their room is given back with
                // the handler's end, sparing the hot path a body wrapper.
                let hold_with_body = class_of(kind) == Class::WriteOrBatch;
                Admitted { inner: Some(self.inner.call(request)), permit: Some(permit), hold_with_body, refused: None }
            }
            None => Admitted {
                inner: None,
                permit: None,
                hold_with_body: false,
                refused: Some(Box::pin(refuse(request.into_body(), self.admission.drain_bytes))),
            },
        }
    }
}

pin_project! {
    /// An admitted request running (`inner`, holding `permit`), or a refusal to send.
    pub struct Admitted<F> {
        #[pin]
        inner: Option<F>,
        permit: Option<Permit>,
        hold_with_body: bool,
        refused: Option<Pin<Box<dyn Future<Output = Response> + Send>>>,
    }
}

/// The 429 for a refused request, sent once its body has been read and discarded (up to
/// `limit` bytes within [`DRAIN_TIME`]; past either, sent with `Connection: close`). Nothing of
/// the body is kept: a refusal takes no memory.
async fn refuse(body: Body, limit: usize) -> Response {
    let drained = tokio::time::timeout(DRAIN_TIME, drain(body, limit)).await;
    let mut response = AppError::Overloaded.into_response();
    if !matches!(drained, Ok(true)) {
        response.headers_mut().insert(axum::http::header::CONNECTION, axum::http::HeaderValue::from_static("close"));
    }
    response
}

/// Reads `body` to its end, keeping nothing; false if it is over `limit` bytes or fails.
async fn drain(body: Body, limit: usize) -> bool {
    use futures::StreamExt as _;
    let mut chunks = body.into_data_stream();
    let mut read = 0;
    while let Some(chunk) = chunks.next().await {
        match chunk {
            Ok(chunk) if read + chunk.len() <= limit => read += chunk.len(),
            _ => return false,
        }
    }
    true
}

impl<F, B, E> Future for Admitted<F>
where
    F: Future<Output = Result<axum::http::Response<B>, E>>,
    B: HttpBody<Data = Bytes> + Send + 'static,
    B::Error: Into<axum::BoxError>,
{
    type Output = Result<Response, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let Some(inner) = this.inner.as_pin_mut() else {
            return match this.refused.as_mut() {
                Some(refusal) => refusal.as_mut().poll(cx).map(Ok),
                None => Poll::Ready(Ok(AppError::Overloaded.into_response())),
            };
        };
        let response = std::task::ready!(inner.poll(cx))?;
        Poll::Ready(Ok(match (this.permit.take(), *this.hold_with_body) {
            (Some(permit), true) => {
                response.map(|body| Body::new(HoldingBody { body: Body::new(body), _permit: permit }))
            }
            // `Body::new` of a `Body` is the same body, not boxed again.
            _ => response.map(Body::new),
        }))
    }
}

pin_project! {
    /// An answer's body that gives its request's room back once sent (or dropped).
    struct HoldingBody {
        #[pin]
        body: Body,
        _permit: Permit,
    }
}

impl HttpBody for HoldingBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        self.project().body.poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::budget::{MemoryLimit, Source};
    use crate::config::Config;
    use axum::routing::{get, post};
    use axum::Router;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tower::ServiceExt;

    #[test]
    fn each_route_is_the_kind_its_memory_was_measured_as() {
        assert_eq!(kind_of(&Method::GET, paths::KEY), Kind::Lookup);
        assert_eq!(kind_of(&Method::HEAD, paths::KEY), Kind::Lookup);
        assert_eq!(kind_of(&Method::PUT, paths::KEY), Kind::Write);
        assert_eq!(kind_of(&Method::DELETE, paths::KEY), Kind::Write);
        assert_eq!(kind_of(&Method::POST, paths::LOOKUPS), Kind::BatchLookup);
        assert_eq!(kind_of(&Method::POST, paths::KEYS), Kind::BatchWrite);
        assert_eq!(kind_of(&Method::GET, paths::SEGMENT), Kind::EdgeFeed);
        assert_eq!(kind_of(&Method::PUT, paths::FILTER), Kind::Write);
    }

    /// A router whose batch route counts itself into `entered`, then waits until `gate` has a
    /// permit, behind limiters of `config`.
    fn app(config: &Config, gate: Arc<Semaphore>, entered: Arc<AtomicUsize>) -> (Router, Arc<Metrics>) {
        let limit = MemoryLimit { bytes: 1 << 30, source: Source::Setting };
        let caps = Caps::derive(config, limit, 0).unwrap();
        let metrics = Arc::new(Metrics::new());
        let admission = Admission::new(&caps, metrics.clone(), 1 << 20);
        let router = Router::new()
            .route(paths::KEY, get(|| async { "seen" }))
            .route(
                paths::KEYS,
                post(move || async move {
                    entered.fetch_add(1, Ordering::SeqCst);
                    let _ = gate.acquire().await;
                    "stored"
                }),
            )
            .layer(admission.layer());
        (router, metrics)
    }

    async fn send(app: &Router, method: Method, path: &str) -> Response {
        let request = Request::builder().method(method).uri(path).body(Body::empty()).unwrap();
        app.clone().oneshot(request).await.unwrap()
    }

    #[tokio::test]
    async fn a_full_class_refuses_at_once_with_429_and_the_other_class_still_answers() {
        let (gate, entered) = (Arc::new(Semaphore::new(0)), Arc::new(AtomicUsize::new(0)));
        let (app, metrics) = app(&Config { max_in_flight: 2, ..Config::default() }, gate.clone(), entered.clone());
        let held: Vec<_> = (0..2)
            .map(|_| {
                let app = app.clone();
                tokio::spawn(async move { send(&app, Method::POST, "/v1/filters/f/keys").await.status() })
            })
            .collect();
        // Both in their handlers (a third sent earlier could take a room and wait at the gate).
        while entered.load(Ordering::SeqCst) < 2 {
            tokio::task::yield_now().await;
        }
        let refused = send(&app, Method::POST, "/v1/filters/f/keys").await;
        assert_eq!(refused.status(), 429, "a full class refuses at once");
        assert!(refused.headers().contains_key("retry-after"), "a 429 says when to retry");
        assert_eq!(send(&app, Method::GET, "/v1/filters/f/keys/k").await.status(), 200, "writes do not shed lookups");
        gate.add_permits(2);
        for task in held {
            assert_eq!(task.await.unwrap(), 200);
        }
        let text = metrics.render();
        assert!(text.contains("bloomgate_overloaded_total{class=\"write_or_batch\"} 1"), "{text}");
        assert!(text.contains("bloomgate_overloaded_total{class=\"lookup\"} 0"), "{text}");
    }

    #[tokio::test]
    async fn room_comes_back_when_the_answer_has_been_sent() {
        let entered = Arc::new(AtomicUsize::new(0));
        let (app, _) = app(&Config { max_in_flight: 1, ..Config::default() }, Arc::new(Semaphore::new(1000)), entered);
        let answered = send(&app, Method::POST, "/v1/filters/f/keys").await;
        assert_eq!(answered.status(), 200);
        // Its handler is done, its body not sent yet: it still holds the room.
        assert_eq!(send(&app, Method::POST, "/v1/filters/f/keys").await.status(), 429);
        let body = axum::body::to_bytes(answered.into_body(), 1024).await.unwrap();
        assert_eq!(&body[..], b"stored");
        assert_eq!(send(&app, Method::POST, "/v1/filters/f/keys").await.status(), 200);
        // Lookups give theirs back with the handler's end.
        let seen = send(&app, Method::GET, "/v1/filters/f/keys/k").await;
        assert_eq!(send(&app, Method::GET, "/v1/filters/f/keys/k").await.status(), 200);
        drop(seen);
    }

    /// A body of `chunks` chunks of 64 KiB that counts the bytes read from it into `read`.
    fn counted_body(chunks: usize, read: Arc<AtomicUsize>) -> Body {
        use futures::StreamExt as _;
        let stream = futures::stream::iter(0..chunks).map(move |_| {
            read.fetch_add(65536, Ordering::SeqCst);
            Ok::<_, std::io::Error>(Bytes::from(vec![b'a'; 65536]))
        });
        Body::from_stream(stream)
    }

    #[tokio::test]
    async fn a_refused_body_is_read_to_its_end_before_the_429_so_the_client_gets_it() {
        let (gate, entered) = (Arc::new(Semaphore::new(0)), Arc::new(AtomicUsize::new(0)));
        let (app, _) = app(&Config { max_in_flight: 1, ..Config::default() }, gate.clone(), entered.clone());
        let held = {
            let app = app.clone();
            tokio::spawn(async move { send(&app, Method::POST, "/v1/filters/f/keys").await.status() })
        };
        while entered.load(Ordering::SeqCst) < 1 {
            tokio::task::yield_now().await;
        }
        let post = |body| Request::builder().method(Method::POST).uri("/v1/filters/f/keys").body(body).unwrap();

        // 512 KiB, within the 1 MiB drain limit: read whole, then the 429 on an open connection.
        let read = Arc::new(AtomicUsize::new(0));
        let refused = app.clone().oneshot(post(counted_body(8, read.clone()))).await.unwrap();
        assert_eq!(refused.status(), 429);
        assert_eq!(read.load(Ordering::SeqCst), 8 * 65536, "the refused body was read to its end");
        assert!(!refused.headers().contains_key("connection"));

        // 2 MiB, over the limit: the 429 is sent once the limit is passed, the connection closed.
        let read = Arc::new(AtomicUsize::new(0));
        let refused = app.clone().oneshot(post(counted_body(32, read.clone()))).await.unwrap();
        assert_eq!(refused.status(), 429);
        assert!(read.load(Ordering::SeqCst) <= (1 << 20) + 65536, "read past the limit");
        assert_eq!(refused.headers()["connection"], "close");
        gate.add_permits(1);
        assert_eq!(held.await.unwrap(), 200);
    }
}
