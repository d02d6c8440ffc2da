//! A local bloomgate stand-in for the client's tests: batch lookups and writes with a
//! `max_batch` of its own, refused as the origin refuses them (413, its words), one key's
//! lookup, and refusals scripted in advance by the request's number (429 or 503 with
//! `Retry-After`, 400). Every request is recorded.

#![allow(dead_code)] // each test file uses its own part

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use bloomgate_client::api::{parse_batch_keys, AnsweredBy, BatchKeysError, KeyAnswer, KeysStored, Lookups, Problem};
use bloomgate_client::{headers, media};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A refusal the server gives instead of its answer.
#[derive(Clone, Copy, Debug)]
pub struct Refusal {
    /// The status.
    pub status: u16,
    /// `Retry-After`, seconds.
    pub retry_after: Option<u64>,
}

/// What the server was asked, and what it will refuse.
#[derive(Default)]
struct Shared {
    max_batch: usize,
    /// The keys of every batch request, in order, refused ones included.
    batches: Mutex<Vec<Vec<String>>>,
    /// Every request's path, in order.
    requests: Mutex<Vec<String>>,
    /// Refusals by the request's number (0 for the first request the server got).
    script: Mutex<HashMap<usize, Refusal>>,
    /// How long each answer takes.
    delay: Duration,
}

/// A running stand-in; stops with the test's runtime.
#[derive(Clone)]
pub struct Server {
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    shared: Arc<Shared>,
}

impl Server {
    /// Serves with `max_batch` keys per batch request, answering at once.
    pub async fn start(max_batch: usize) -> Server {
        Server::start_with(max_batch, Duration::ZERO).await
    }

    /// Serves with `max_batch`, each answer taking `delay`.
    pub async fn start_with(max_batch: usize, delay: Duration) -> Server {
        let shared = Arc::new(Shared { max_batch, delay, ..Shared::default() });
        let app = Router::new()
            .route("/v1/filters/{filter}/lookups", post(lookups))
            .route("/v1/filters/{filter}/keys", post(writes))
            .route("/v1/filters/{filter}/keys/{key}", get(lookup))
            .with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        Server { base, shared }
    }

    /// Refuses the next requests, one refusal each, in order.
    pub fn refuse_next(&self, refusals: &[Refusal]) {
        let first = self.requests();
        for (n, refusal) in refusals.iter().enumerate() {
            self.refuse_request(first + n, *refusal);
        }
    }

    /// Refuses request number `n` (0 for the first the server gets).
    pub fn refuse_request(&self, n: usize, refusal: Refusal) {
        self.shared.script.lock().unwrap().insert(n, refusal);
    }

    /// The keys of every batch request so far, refused ones included.
    pub fn batches(&self) -> Vec<Vec<String>> {
        self.shared.batches.lock().unwrap().clone()
    }

    /// How many keys each batch request so far had.
    pub fn batch_sizes(&self) -> Vec<usize> {
        self.batches().iter().map(Vec::len).collect()
    }

    /// How many requests arrived so far.
    pub fn requests(&self) -> usize {
        self.shared.requests.lock().unwrap().len()
    }
}

/// "Seen" is any key that starts with `s`: answers the tests can predict.
fn answer(filter: &str, key: &str) -> KeyAnswer {
    let mut answer = KeyAnswer::not_seen(filter, key, AnsweredBy::Filter);
    if key.starts_with('s') {
        answer.seen = true;
        answer.answered_by = AnsweredBy::Database;
    }
    answer
}

fn problem(problem: Problem, retry_after: Option<u64>) -> Response {
    let status = StatusCode::from_u16(problem.status).unwrap();
    let mut response = (status, [(header::CONTENT_TYPE, media::PROBLEM_JSON)], problem.to_json()).into_response();
    if let Some(secs) = retry_after {
        response.headers_mut().insert(headers::RETRY_AFTER, secs.to_string().parse().unwrap());
    }
    response
}

fn json(status: StatusCode, body: &impl serde::Serialize) -> Response {
    (status, [(header::CONTENT_TYPE, media::JSON)], serde_json::to_string(body).unwrap()).into_response()
}

/// Records the request and takes the time the server takes; the request's number.
async fn arrive(shared: &Shared, path: String) -> usize {
    let n = {
        let mut requests = shared.requests.lock().unwrap();
        requests.push(path);
        requests.len() - 1
    };
    tokio::time::sleep(shared.delay).await;
    n
}

/// The scripted refusal for request `n`, if any.
fn scripted(shared: &Shared, n: usize) -> Option<Response> {
    let refusal = shared.script.lock().unwrap().remove(&n)?;
    let words = format!("refused on cue ({})", refusal.status);
    Some(problem(Problem::new(refusal.status, words).with_hint("Try again later."), refusal.retry_after))
}

/// The batch's keys as the origin reads them, or a refusal: scripted, or the origin's own of a
/// batch over `max_batch`. Every batch is recorded whole, refused or not.
fn batch(shared: &Shared, n: usize, body: &[u8]) -> Result<Vec<String>, Box<Response>> {
    let all =
        parse_batch_keys(body, usize::MAX).map_err(|e| Box::new(problem(Problem::new(400, format!("{e:?}")), None)))?;
    shared.batches.lock().unwrap().push(all.clone());
    if let Some(refused) = scripted(shared, n) {
        return Err(Box::new(refused));
    }
    match all.len() > shared.max_batch {
        true => {
            let refusal = Problem::new(413, BatchKeysError::too_many_detail(shared.max_batch, all.len()))
                .with_hint(BatchKeysError::TOO_MANY_HINT);
            Err(Box::new(problem(refusal, None)))
        }
        false => Ok(all),
    }
}

async fn lookups(State(shared): State<Arc<Shared>>, Path(filter): Path<String>, body: Bytes) -> Response {
    let n = arrive(&shared, format!("/v1/filters/{filter}/lookups")).await;
    match batch(&shared, n, &body) {
        Ok(keys) => {
            let results = keys.iter().map(|key| answer(&filter, key)).collect();
            json(StatusCode::OK, &Lookups { filter, results })
        }
        Err(refused) => *refused,
    }
}

async fn writes(State(shared): State<Arc<Shared>>, Path(filter): Path<String>, body: Bytes) -> Response {
    let n = arrive(&shared, format!("/v1/filters/{filter}/keys")).await;
    match batch(&shared, n, &body) {
        Ok(keys) => json(StatusCode::OK, &KeysStored { filter, stored: keys.len() }),
        Err(refused) => *refused,
    }
}

async fn lookup(State(shared): State<Arc<Shared>>, Path((filter, key)): Path<(String, String)>) -> Response {
    let n = arrive(&shared, format!("/v1/filters/{filter}/keys/{key}")).await;
    if let Some(refused) = scripted(&shared, n) {
        return refused;
    }
    let answer = answer(&filter, &key);
    json(if answer.seen { StatusCode::OK } else { StatusCode::NOT_FOUND }, &answer)
}
