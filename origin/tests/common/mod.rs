//! An origin on the embedded stores (the filter in process, keys in a redb file in a directory
//! of its own), driven through its whole router without a socket: every layer, handler and
//! store call a served request meets.

#![allow(dead_code)] // each test file uses its own part

pub mod floor;
pub mod hooked;

use axum::body::Body;
use axum::http::{HeaderMap, Method, Request, StatusCode};
use bloomgate_origin::config::Config;
use bloomgate_origin::gate::{Gate, GateSettings};
use bloomgate_origin::routes::AppState;
use bloomgate_origin::store::{Database, FilterStore};
use std::sync::Arc;
use tower::ServiceExt;

/// The writer token of every test origin.
pub const WRITER: &str = "writer-token-0123456789";
/// The ops token of every test origin.
pub const OPS: &str = "ops-token-0123456789ab";

/// A SHA-256-shaped key (the default key format) made of `byte`.
pub fn key(byte: u8) -> String {
    format!("{byte:02x}").repeat(32)
}

/// An origin on the embedded stores; its key file is removed when dropped.
pub struct Embedded {
    /// The router, as `run` serves it.
    pub app: axum::Router,
    /// Its state (gate, config).
    pub state: AppState,
    dir: std::path::PathBuf,
}

/// An answer: status, headers, body.
pub struct Answer {
    /// The status.
    pub status: StatusCode,
    /// The headers.
    pub headers: HeaderMap,
    /// The body as text.
    pub body: String,
}

impl Answer {
    /// The body as JSON (panics with the body if it is not).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }

    /// The body as JSON, or null if it is not JSON.
    pub fn json_or_null(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_default()
    }

    /// A header's value as text ("" if absent).
    pub fn header(&self, name: &str) -> &str {
        self.headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or("")
    }
}

/// A directory of its own for a test's key file.
pub fn temp_dir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("bloomgate-origin-test-{:016x}", rand::random::<u64>()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The config of a test origin: the embedded stores in `dir`, a writer and an ops token, an
/// edge secret, no background recovery check; then `tune`.
fn test_config(dir: &std::path::Path, tune: impl FnOnce(&mut Config)) -> Config {
    let mut config = Config {
        data_dir: dir.to_owned(),
        writer_tokens: vec![WRITER.into()],
        ops_tokens: vec![OPS.into()],
        edge_secret: Some("edge-secret-0123456789".into()),
        recovery_interval_ms: 0,
        ..Config::default()
    };
    tune(&mut config);
    config
}

impl Embedded {
    /// Starts one on the embedded stores, as `serve` would, with `tune` applied to the config.
    pub async fn start(tune: impl FnOnce(&mut Config)) -> Embedded {
        let dir = temp_dir();
        let state =
            bloomgate_origin::build_state(test_config(&dir, tune)).await.expect("an origin on the embedded stores");
        Embedded { app: bloomgate_origin::app(state.clone()), state, dir }
    }

    /// Starts one over the stores given (its key file, if any, in `dir`).
    pub fn over(
        dir: std::path::PathBuf,
        filters: Arc<dyn FilterStore>,
        keys: Arc<dyn Database>,
        tune: impl FnOnce(&mut Config),
    ) -> Embedded {
        let config = test_config(&dir, tune);
        let settings = GateSettings { local_copy_max_bytes: 0, ..GateSettings::from_config(&config) };
        let caps = Arc::new(bloomgate_origin::caps_for(&config, 0).expect("caps for a test origin"));
        let state = AppState { gate: Arc::new(Gate::new(filters, keys, settings)), config: Arc::new(config), caps };
        Embedded { app: bloomgate_origin::app(state.clone()), state, dir }
    }

    /// Sends one request: `token` as a bearer token, `body` as JSON when given.
    pub async fn send(&self, method: Method, path: &str, token: Option<&str>, body: Option<&str>) -> Answer {
        let mut request = Request::builder().method(method).uri(path);
        if let Some(token) = token {
            request = request.header("authorization", format!("Bearer {token}"));
        }
        if body.is_some() {
            request = request.header("content-type", "application/json");
        }
        let request = request.body(body.map_or_else(Body::empty, |b| Body::from(b.to_owned()))).unwrap();
        let response = self.app.clone().oneshot(request).await.unwrap();
        let (parts, body) = response.into_parts();
        let bytes = axum::body::to_bytes(body, usize::MAX).await.unwrap();
        Answer { status: parts.status, headers: parts.headers, body: String::from_utf8_lossy(&bytes).into_owned() }
    }

    /// Creates filter `name` (hex:64 keys, 1000 keys at 1 %) with the writer token.
    pub async fn create(&self, name: &str) -> Answer {
        let path = bloomgate_client::paths::filter(name);
        self.send(Method::PUT, &path, Some(WRITER), Some(r#"{"capacity":1000,"fp_rate":0.01}"#)).await
    }

    /// Stores `key` in `name` with the writer token.
    pub async fn put(&self, name: &str, key: &str) -> Answer {
        self.send(Method::PUT, &bloomgate_client::paths::key(name, key), Some(WRITER), None).await
    }
}

impl Drop for Embedded {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
