//! The workload: writers and readers at bounded rates (never "as fast as the machine
//! allows": the same run must mean the same on a quiet and on a busy machine), recording every
//! operation. Each acknowledged write is read back at once through a *different* origin (the
//! race of a write via B and a read via A) and, S seconds later, through the edge; readers ask
//! for random acknowledged keys and for keys nobody writes; batches and deletes run beside, a
//! share of the deletes sent through another origin as soon as their key's write was
//! acknowledged and read back at once through a third.
//!
//! Every operation runs as its own task under a cap on operations in flight, one cap for the
//! origins and one for the edge (a slow edge must not starve the origins' workload): when the
//! cap is reached the operation is skipped and counted, so a stalled system is not buried
//! under a growing backlog. An edge that refuses every connection for a while is given up on
//! (see [`edge_watch`]).
//!
//! # Layout
//! - this file: the workload's state and its requests, each recorded as an operation.
//! - [`answers`]: what an API answer means for the history.
//! - [`streams`]: the paced streams of writes and lookups, and the preload.
//! - [`deletes`]: the delete streams (two seconds after a write, or right after it, through
//!   another origin), the keys written again, and the delete burst of a fault.
//! - [`edge_watch`]: when to give up on the edge.

mod answers;
mod deletes;
pub mod edge_watch;
mod streams;

use crate::history::{EdgeDown, Micros, Op, OpKind, Outcome, Recorder, Target, Why};
use crate::keys::{KeyId, KeySpace};
use answers::{batch_answers, detail, single_answer};
use bloomgate_tests::origin::TOKEN;
use edge_watch::{EdgeReply, EdgeWatch, EDGE_DOWN_AFTER};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Semaphore;

/// Rates and sizes.
#[derive(Clone, Debug, serde::Serialize)]
pub struct WorkloadSettings {
    /// Single-key writes per second, in total (each followed by a read through another origin
    /// and, S later, one through the edge).
    pub write_rate: f64,
    /// Random lookups per second through the origins.
    pub read_rate: f64,
    /// Random lookups per second through the edge.
    pub edge_read_rate: f64,
    /// Batch writes per second (each read back as a batch through another origin), and as
    /// many random batch lookups.
    pub batch_rate: f64,
    /// Keys per batch write.
    pub batch_write_keys: usize,
    /// Keys per random batch lookup.
    pub batch_lookup_keys: usize,
    /// Deletes per second (of keys written for that purpose).
    pub delete_rate: f64,
    /// Share of the deletes sent as soon as their key's write was acknowledged, through another
    /// origin, and read back at once through a third (and the edge); the others come two
    /// seconds after their key's write.
    pub delete_after_write_share: f64,
    /// Share of the deleted keys written again: a second after their delete, or, for those
    /// deleted right after their write, as soon as the delete was acknowledged.
    pub readd_share: f64,
    /// Share of random lookups for never-written keys.
    pub absent_share: f64,
    /// The edge's freshness bound S.
    pub freshness: Duration,
    /// Operations in flight at most, to the origins and to the edge each; beyond, new ones are
    /// skipped.
    pub max_in_flight: usize,
}

/// Where to send requests.
#[derive(Clone, Debug)]
pub struct Endpoints {
    /// Origins' base URLs, by index.
    pub origins: Vec<String>,
    /// The edge's base URL.
    pub edge: Option<String>,
}

/// Mutable state under one lock.
struct State {
    rng: StdRng,
    /// Written keys, in the order they were acknowledged.
    acked: Vec<KeyId>,
    /// Keys written to be deleted, with when they were acknowledged.
    to_delete: VecDeque<(KeyId, Micros)>,
}

/// The running workload.
pub struct Workload {
    http: reqwest::Client,
    endpoints: Endpoints,
    filter: String,
    keys: KeySpace,
    rec: Arc<Recorder>,
    settings: WorkloadSettings,
    state: Mutex<State>,
    next_written: AtomicU32,
    next_deletable: AtomicU32,
    /// Multiplier of the random lookup rates (a lookup burst sets it to 10).
    pub burst: AtomicU32,
    /// In-flight caps: [origins, edge].
    permits: [Arc<Semaphore>; 2],
    /// Skipped operations: [origins, edge].
    skipped: [AtomicU64; 2],
    stopped: AtomicBool,
    /// Set while an `edge_cut` fault is active (by the fault track).
    pub edge_cut: AtomicBool,
    edge_watch: Mutex<EdgeWatch>,
    /// Edge operations not sent because the edge was given up on.
    edge_not_sent: AtomicU64,
}

impl Workload {
    /// A workload over these endpoints; nothing runs until [`run`](Self::run).
    pub fn new(
        http: reqwest::Client,
        endpoints: Endpoints,
        filter: String,
        keys: KeySpace,
        rec: Arc<Recorder>,
        settings: WorkloadSettings,
        seed: u64,
    ) -> Workload {
        let permits =
            [Arc::new(Semaphore::new(settings.max_in_flight)), Arc::new(Semaphore::new(settings.max_in_flight))];
        Workload {
            http,
            endpoints,
            filter,
            keys,
            rec,
            state: Mutex::new(State {
                rng: StdRng::seed_from_u64(seed ^ 0x5eed),
                acked: Vec::new(),
                to_delete: VecDeque::new(),
            }),
            settings,
            next_written: AtomicU32::new(0),
            next_deletable: AtomicU32::new(0),
            burst: AtomicU32::new(1),
            permits,
            skipped: [AtomicU64::new(0), AtomicU64::new(0)],
            stopped: AtomicBool::new(false),
            edge_cut: AtomicBool::new(false),
            edge_watch: Mutex::new(EdgeWatch::new(EDGE_DOWN_AFTER)),
            edge_not_sent: AtomicU64::new(0),
        }
    }

    fn with<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        f(&mut self.state.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Operations skipped because too many were in flight: (to the origins, to the edge).
    pub fn skipped(&self) -> (u64, u64) {
        (self.skipped[0].load(Ordering::Relaxed), self.skipped[1].load(Ordering::Relaxed))
    }

    /// Edge operations not sent because the edge stopped answering.
    pub fn edge_not_sent(&self) -> u64 {
        self.edge_not_sent.load(Ordering::Relaxed)
    }

    fn edge_given_up(&self) -> bool {
        self.edge_watch.lock().unwrap_or_else(|e| e.into_inner()).is_down()
    }

    /// Feeds an edge operation's reply to the watch; gives the edge up when it says so.
    fn watch_edge(&self, start: Micros, end: Micros, reply: EdgeReply) {
        let cut = self.edge_cut.load(Ordering::SeqCst);
        let down = self.edge_watch.lock().unwrap_or_else(|e| e.into_inner()).reply(start, end, reply, cut);
        if let Some(since) = down {
            self.rec.edge_down(EdgeDown { refused_since: since, at: end, not_sent: 0, note: String::new() });
            self.rec.note(format!(
                "the edge refused every connection from {:.1}s to {:.1}s with no edge_cut active: it stopped \
                 answering; nothing more is sent to it",
                since as f64 / 1e6,
                end as f64 / 1e6
            ));
        }
    }

    /// Acknowledged written keys so far.
    pub fn acked_count(&self) -> usize {
        self.with(|s| s.acked.len())
    }

    fn url(&self, target: Target, path: &str) -> String {
        let base = match target {
            Target::Origin(i) => &self.endpoints.origins[i as usize],
            Target::Edge => self.endpoints.edge.as_deref().unwrap_or("http://edge.invalid"),
        };
        format!("{base}/v1/filters/{}{path}", self.filter)
    }

    fn random_origin(&self) -> Target {
        let n = self.endpoints.origins.len();
        Target::Origin(self.with(|s| s.rng.random_range(0..n)) as u8)
    }

    fn other_origin(&self, not: Target) -> Target {
        let n = self.endpoints.origins.len() as u8;
        let Target::Origin(not) = not else { return self.random_origin() };
        let step = self.with(|s| s.rng.random_range(1..n));
        Target::Origin((not + step) % n)
    }

    /// An origin other than `a` and `b` if there is one, else one other than `b`.
    fn third_origin(&self, a: Target, b: Target) -> Target {
        let others: Vec<u8> =
            (0..self.endpoints.origins.len() as u8).filter(|o| ![a, b].contains(&Target::Origin(*o))).collect();
        if others.is_empty() {
            return self.other_origin(b);
        }
        Target::Origin(others[self.with(|s| s.rng.random_range(0..others.len()))])
    }

    /// A random acknowledged key (half of the time one of the last thousand), or a key
    /// nobody writes.
    fn random_key(&self) -> KeyId {
        let absent_share = self.settings.absent_share;
        self.with(|s| {
            if s.acked.is_empty() || s.rng.random_bool(absent_share) {
                return KeyId::absent(s.rng.random());
            }
            let n = s.acked.len();
            let i = if s.rng.random_bool(0.5) {
                s.rng.random_range(n.saturating_sub(1000)..n)
            } else {
                s.rng.random_range(0..n)
            };
            s.acked[i]
        })
    }

    /// Sends one request and records the operation.
    async fn send(
        &self,
        kind: OpKind,
        why: Why,
        target: Target,
        keys: Vec<KeyId>,
        request: reqwest::RequestBuilder,
        hex: &[String],
    ) -> Outcome {
        let start = self.rec.now();
        let mut reply = EdgeReply::Answered;
        let outcome = match request.send().await {
            Err(e) => {
                reply = if refused(&e) { EdgeReply::Refused } else { EdgeReply::OtherError };
                Outcome::Transport { error: format!("{e:?}").chars().take(300).collect() }
            }
            Ok(r) => {
                let status = r.status().as_u16();
                let retry_after = r.headers().contains_key("retry-after");
                let answered_by =
                    r.headers().get("x-bloomgate-answered-by").and_then(|v| v.to_str().ok()).map(str::to_owned);
                match r.text().await {
                    Err(e) => {
                        reply = EdgeReply::OtherError;
                        Outcome::Transport { error: format!("body: {e:?}").chars().take(300).collect() }
                    }
                    Ok(body) => {
                        let answer = match (kind, status) {
                            (OpKind::Write, 201) | (OpKind::WriteBatch, 200) | (OpKind::Delete, 200) => {
                                Some(Outcome::Acked)
                            }
                            (OpKind::Lookup, 200 | 404) => {
                                single_answer(status, answered_by.as_deref(), &body).map(|a| Outcome::Answers(vec![a]))
                            }
                            (OpKind::LookupBatch, 200) => batch_answers(&body, hex).map(Outcome::Answers),
                            _ => None,
                        };
                        answer.unwrap_or_else(|| Outcome::Status { code: status, retry_after, detail: detail(&body) })
                    }
                }
            }
        };
        let end = self.rec.now();
        self.rec.op(Op { kind, why, target, start, end, keys, outcome: outcome.clone() });
        if target == Target::Edge {
            self.watch_edge(start, end, reply);
        }
        outcome
    }

    async fn write(&self, target: Target, key: KeyId, why: Why) -> bool {
        let hex = self.keys.hex(key);
        let request = self.http.put(self.url(target, &format!("/keys/{hex}"))).bearer_auth(TOKEN);
        self.send(OpKind::Write, why, target, vec![key], request, &[]).await == Outcome::Acked
    }

    async fn write_batch(&self, target: Target, keys: Vec<KeyId>, why: Why) -> bool {
        let hex: Vec<String> = keys.iter().map(|k| self.keys.hex(*k)).collect();
        let request = self.http.post(self.url(target, "/keys")).bearer_auth(TOKEN).json(&json!({ "keys": hex }));
        self.send(OpKind::WriteBatch, why, target, keys, request, &[]).await == Outcome::Acked
    }

    async fn lookup(&self, target: Target, key: KeyId, why: Why) {
        let request = self.http.get(self.url(target, &format!("/keys/{}", self.keys.hex(key))));
        self.send(OpKind::Lookup, why, target, vec![key], request, &[]).await;
    }

    async fn lookup_batch(&self, target: Target, keys: Vec<KeyId>, why: Why) {
        let hex: Vec<String> = keys.iter().map(|k| self.keys.hex(*k)).collect();
        let request = self.http.post(self.url(target, "/lookups")).json(&json!({ "keys": hex }));
        self.send(OpKind::LookupBatch, why, target, keys, request, &hex).await;
    }

    async fn delete(&self, target: Target, key: KeyId, why: Why) -> bool {
        let request = self.http.delete(self.url(target, &format!("/keys/{}", self.keys.hex(key)))).bearer_auth(TOKEN);
        self.send(OpKind::Delete, why, target, vec![key], request, &[]).await == Outcome::Acked
    }

    fn remember(&self, keys: &[KeyId]) {
        self.with(|s| s.acked.extend_from_slice(keys));
    }

    /// Runs `f` as a task under the in-flight cap of `to` (origins or edge), or counts it
    /// skipped (or not sent, to an edge given up on).
    fn spawn<F>(self: &Arc<Self>, to: Target, f: impl FnOnce(Arc<Workload>) -> F)
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        if to == Target::Edge && self.edge_given_up() {
            self.edge_not_sent.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let class = usize::from(to == Target::Edge);
        match self.permits[class].clone().try_acquire_owned() {
            Ok(permit) => {
                let task = f(self.clone());
                tokio::spawn(async move {
                    task.await;
                    drop(permit);
                });
            }
            Err(_) => {
                self.skipped[class].fetch_add(1, Ordering::Relaxed);
                self.rec.skipped(to == Target::Edge);
            }
        }
    }
}

/// Whether the request failed because the connection was refused (nothing listens).
fn refused(e: &reqwest::Error) -> bool {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cause {
        if c.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::ConnectionRefused) {
            return true;
        }
        cause = c.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_port_nobody_listens_on_is_refused_and_a_timeout_is_not() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        drop(listener);
        let http = reqwest::Client::new();
        let e = http.get(format!("http://{addr}/")).send().await.unwrap_err();
        assert!(refused(&e), "{e:?}");
        // Listening but never answering: a timeout, not a refusal.
        let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/", silent.local_addr().unwrap());
        let e = http.get(url).timeout(Duration::from_millis(100)).send().await.unwrap_err();
        assert!(!refused(&e), "{e:?}");
    }
}
