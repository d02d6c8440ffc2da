//! The lookup lane (`routes::lookup_lane`: admission, request metrics, path, lookup and answer
//! in one handler) against the route it replaced (the lookup handler behind the admission and
//! request-metrics layers), on two origins over the embedded stores given the same requests:
//! the same status, headers and body for a stored key, an absent one (GET and HEAD), an escaped
//! key, a bad key, a bad escape, an unknown filter and a refusal above the cap (429), and the
//! same metric lines afterwards. `cargo test -p bloomgate-origin --test lookup_lane_golden`.

mod common;

use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use axum::Router;
use bloomgate_client::paths;
use bloomgate_origin::admission::Admission;
use bloomgate_origin::request_metrics::TrackRequestsLayer;
use bloomgate_origin::routes::{keys, AppState};
use bloomgate_origin::store::embedded::MemoryFilterStore;
use common::hooked::Hooked;
use common::{key, Answer, Embedded};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tower::ServiceExt;

/// The lookup route behind the layers the rest of the API has: how lookups were served before
/// the lane.
fn layered(state: &AppState) -> Router {
    let admission = Admission::new(&state.caps, state.gate.metrics.clone(), state.config.max_body_bytes());
    keys::lookup_router()
        .with_state(state.clone())
        .layer(admission.layer())
        .layer(TrackRequestsLayer::new(state.gate.metrics.clone()))
}

async fn send(app: &Router, method: Method, path: &str) -> Answer {
    let request = Request::builder().method(method).uri(path).body(Body::empty()).unwrap();
    let response = app.clone().oneshot(request).await.unwrap();
    let (parts, body) = response.into_parts();
    let bytes = axum::body::to_bytes(body, usize::MAX).await.unwrap();
    Answer { status: parts.status, headers: parts.headers, body: String::from_utf8_lossy(&bytes).into_owned() }
}

/// One side: an origin whose lookups in flight are capped at one, its database held on demand.
struct Side {
    origin: Arc<Embedded>,
    keys: Arc<Hooked>,
    lookups: Router,
}

impl Side {
    async fn start(lane: bool) -> Side {
        let dir = common::temp_dir();
        let keys = Arc::new(Hooked::open(&dir));
        let origin = Embedded::over(dir, Arc::new(MemoryFilterStore::default()), keys.clone(), |c| c.max_in_flight = 1);
        let lookups = if lane { origin.app.clone() } else { layered(&origin.state) };
        assert_eq!(origin.create("f").await.status, StatusCode::CREATED);
        assert_eq!(origin.put("f", &key(1)).await.status, StatusCode::CREATED);
        Side { origin: Arc::new(origin), keys, lookups }
    }

    /// Every answer to the probes, in order, then a 429 while a lookup is held in the database.
    async fn answers(&self) -> Vec<(String, Answer)> {
        // Written by hand: `paths::key` would escape the `%` itself.
        let escaped = format!("/v1/filters/f/keys/%30{}", &key(10)[1..]);
        let probes = [
            (Method::GET, paths::key("f", &key(1))),
            (Method::GET, paths::key("f", &key(2))),
            (Method::HEAD, paths::key("f", &key(2))),
            (Method::GET, escaped),
            (Method::GET, paths::key("f", "not-hex")),
            (Method::GET, "/v1/filters/f/keys/ab%zz".to_owned()),
            (Method::GET, paths::key("missing", &key(1))),
        ];
        let mut answers = Vec::new();
        for (method, path) in probes {
            answers.push((format!("{method} {path}"), send(&self.lookups, method, &path).await));
        }
        self.keys.hold_gets.store(true, Ordering::SeqCst);
        let held = tokio::spawn({
            let (app, path) = (self.lookups.clone(), paths::key("f", &key(1)));
            async move { send(&app, Method::GET, &path).await.status }
        });
        self.keys.waiting.notified().await;
        let path = paths::key("f", &key(3));
        answers.push((format!("GET {path} above the cap"), send(&self.lookups, Method::GET, &path).await));
        self.keys.hold_gets.store(false, Ordering::SeqCst);
        self.keys.release.notify_one();
        assert_eq!(held.await.unwrap(), StatusCode::OK, "the held lookup was answered");
        answers
    }

    /// The metric lines the lookups move (counts, not timings), sorted (a family's series come
    /// out in no fixed order).
    fn metric_lines(&self) -> Vec<String> {
        let text = self.origin.state.gate.metrics.render();
        let moved = ["keys/{key}", "lookups_total", "overloaded", "in_flight", "admission", "filter_negatives"];
        let timed = ["_bucket", "_sum", "_created"];
        text.lines()
            .filter(|l| !l.starts_with('#') && moved.iter().any(|m| l.contains(m)))
            .filter(|l| !timed.iter().any(|t| l.contains(t)))
            .map(str::to_owned)
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lane_answers_and_counts_as_the_layered_route_did() {
    let (layered, lane) = (Side::start(false).await, Side::start(true).await);
    let (before, after) = (layered.answers().await, lane.answers().await);
    for ((asked, old), (_, new)) in before.iter().zip(&after) {
        assert_eq!(old.status, new.status, "{asked}");
        assert_eq!(old.headers, new.headers, "{asked}");
        assert_eq!(old.body, new.body, "{asked}");
    }
    let statuses: Vec<u16> = after.iter().map(|(_, a)| a.status.as_u16()).collect();
    assert_eq!(statuses, [200, 404, 404, 404, 400, 400, 404, 429], "each probe got what it tests");
    let (old, new) = (layered.metric_lines(), lane.metric_lines());
    assert!(old.iter().any(|l| l.contains("keys/{key}") && l.contains("status=\"429\"")), "{old:#?}");
    assert_eq!(old, new);
}

#[tokio::test]
async fn a_method_the_key_path_does_not_serve_is_405_counted_and_names_every_method() {
    let origin = Embedded::start(|_| {}).await;
    let path = paths::key("f", &key(1));
    let answer = origin.send(Method::POST, &path, None, None).await;
    assert_eq!(answer.status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(answer.header("allow"), "GET,HEAD,PUT,DELETE", "the lane's methods first, as before it");
    let counted =
        r#"bloomgate_http_requests_total{method="POST",route="/v1/filters/{filter}/keys/{key}",status="405"} 1"#;
    assert!(origin.state.gate.metrics.render().lines().any(|l| l == counted), "the 405 is counted");
}
