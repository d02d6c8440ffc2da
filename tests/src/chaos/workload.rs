//! The workload: writers and readers at bounded rates (never "as fast as the machine
//! allows": the same run must mean the same on a quiet and on a busy machine), recording every
//! operation. Each acknowledged write is read back at once through a *different* origin (the
//! race of a write via B and a read via A) and, S seconds later, through the edge; readers ask
//! for random acknowledged keys and for keys nobody writes; batches and deletes run beside.
//!
//! Every operation runs as its own task under a cap on operations in flight, one cap for the
//! origins and one for the edge (a slow edge must not starve the origins' workload): when the
//! cap is reached the operation is skipped and counted, so a stalled system is not buried
//! under a growing backlog.

use super::history::{Answer, AnsweredBy, Micros, Op, OpKind, Outcome, Recorder, Target, Why};
use super::keys::{KeyId, KeySpace};
use crate::origin::TOKEN;
use futures::StreamExt;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
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
}

/// Parses a lookup answer: 200 `seen:true` or 404 `seen:false`, with who answered.
fn single_answer(status: u16, answered_by: Option<&str>, body: &str) -> Option<Answer> {
    let value: Value = serde_json::from_str(body).ok()?;
    let seen = value.get("seen")?.as_bool()?;
    let by = AnsweredBy::parse(answered_by.or_else(|| value.get("answered_by").and_then(Value::as_str)));
    match (status, seen) {
        (200, true) | (404, false) => Some(Answer { seen, by }),
        _ => None,
    }
}

/// Parses a batch lookup's results, which must name the keys asked, in order.
fn batch_answers(body: &str, asked: &[String]) -> Option<Vec<Answer>> {
    let value: Value = serde_json::from_str(body).ok()?;
    let results = value.get("results")?.as_array()?;
    if results.len() != asked.len() {
        return None;
    }
    results
        .iter()
        .zip(asked)
        .map(|(r, key)| {
            let same = r.get("key")?.as_str()?.eq_ignore_ascii_case(key);
            let seen = r.get("seen")?.as_bool()?;
            same.then(|| Answer { seen, by: AnsweredBy::parse(r.get("answered_by").and_then(Value::as_str)) })
        })
        .collect()
}

fn detail(body: &str) -> String {
    body.chars().take(200).collect()
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
        }
    }

    fn with<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        f(&mut self.state.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Operations skipped because too many were in flight: (to the origins, to the edge).
    pub fn skipped(&self) -> (u64, u64) {
        (self.skipped[0].load(Ordering::Relaxed), self.skipped[1].load(Ordering::Relaxed))
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
        let outcome = match request.send().await {
            Err(e) => Outcome::Transport { error: format!("{e:?}").chars().take(300).collect() },
            Ok(r) => {
                let status = r.status().as_u16();
                let retry_after = r.headers().contains_key("retry-after");
                let answered_by =
                    r.headers().get("x-bloomgate-answered-by").and_then(|v| v.to_str().ok()).map(str::to_owned);
                match r.text().await {
                    Err(e) => Outcome::Transport { error: format!("body: {e:?}").chars().take(300).collect() },
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

    async fn delete(&self, target: Target, key: KeyId) -> bool {
        let request = self.http.delete(self.url(target, &format!("/keys/{}", self.keys.hex(key)))).bearer_auth(TOKEN);
        self.send(OpKind::Delete, Why::Delete, target, vec![key], request, &[]).await == Outcome::Acked
    }

    fn remember(&self, keys: &[KeyId]) {
        self.with(|s| s.acked.extend_from_slice(keys));
    }

    /// Runs `f` as a task under the in-flight cap of `to` (origins or edge), or counts it
    /// skipped.
    fn spawn<F>(self: &Arc<Self>, to: Target, f: impl FnOnce(Arc<Workload>) -> F)
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
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
            }
        }
    }

    /// One write, its read through another origin, and its edge read S later.
    async fn write_and_follow(self: Arc<Self>) {
        let key = KeyId::written(self.next_written.fetch_add(1, Ordering::Relaxed));
        let via = self.random_origin();
        if !self.write(via, key, Why::Write).await {
            return;
        }
        self.remember(&[key]);
        self.lookup(self.other_origin(via), key, Why::ReadAfterWrite).await;
        self.follow_at_edge(vec![key]);
    }

    /// Schedules a read of `keys` through the edge S (plus up to half a second) from now.
    fn follow_at_edge(self: &Arc<Self>, keys: Vec<KeyId>) {
        if self.endpoints.edge.is_none() {
            return;
        }
        let jitter = Duration::from_millis(self.with(|s| s.rng.random_range(0..500)));
        let this = self.clone();
        let wait = self.settings.freshness + jitter;
        tokio::spawn(async move {
            tokio::time::sleep(wait).await;
            if this.stopped.load(Ordering::SeqCst) {
                return;
            }
            this.spawn(Target::Edge, |w| async move {
                if keys.len() == 1 {
                    w.lookup(Target::Edge, keys[0], Why::EdgeAfterFreshness).await;
                } else {
                    w.lookup_batch(Target::Edge, keys, Why::EdgeAfterFreshness).await;
                }
            });
        });
    }

    async fn batch_and_follow(self: Arc<Self>) {
        let first = self.next_written.fetch_add(self.settings.batch_write_keys as u32, Ordering::Relaxed);
        let keys: Vec<KeyId> = (first..first + self.settings.batch_write_keys as u32).map(KeyId::written).collect();
        let via = self.random_origin();
        if !self.write_batch(via, keys.clone(), Why::Write).await {
            return;
        }
        self.remember(&keys);
        self.lookup_batch(self.other_origin(via), keys.clone(), Why::ReadAfterWrite).await;
        self.follow_at_edge(keys);
    }

    async fn random_batch_lookup(self: Arc<Self>, edge: bool) {
        let keys: Vec<KeyId> = (0..self.settings.batch_lookup_keys).map(|_| self.random_key()).collect();
        let target = if edge { Target::Edge } else { self.random_origin() };
        self.lookup_batch(target, keys, Why::Random).await;
    }

    async fn write_deletables(self: Arc<Self>, n: usize) {
        let first = self.next_deletable.fetch_add(n as u32, Ordering::Relaxed);
        let keys: Vec<KeyId> = (first..first + n as u32).map(KeyId::deletable).collect();
        if self.write_batch(self.random_origin(), keys.clone(), Why::Delete).await {
            let at = self.rec.now();
            self.with(|s| s.to_delete.extend(keys.into_iter().map(|k| (k, at))));
        }
    }

    /// Writes keys in batches through random origins until `n` more are acknowledged (the
    /// start of the run: past the filter's small capacity). Gives up after `limit`.
    pub async fn preload(&self, n: usize, limit: Duration) -> usize {
        let started = Instant::now();
        let mut stored = 0;
        while stored < n && started.elapsed() < limit {
            let first = self.next_written.fetch_add(500, Ordering::Relaxed);
            let keys: Vec<KeyId> = (first..first + 500).map(KeyId::written).collect();
            if self.write_batch(self.random_origin(), keys.clone(), Why::Preload).await {
                self.remember(&keys);
                stored += keys.len();
            } else {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
        stored
    }

    /// Writes at least `n` keys of their own (in batches of 500), then deletes them all at once,
    /// 16 at a time through random origins: past the stale-delete share, the origins must
    /// rebuild on their own. Returns the deletes acknowledged.
    pub async fn delete_burst(&self, n: usize, limit: Duration) -> usize {
        let started = Instant::now();
        let mut written = Vec::new();
        while written.len() < n && started.elapsed() < limit {
            let first = self.next_deletable.fetch_add(500, Ordering::Relaxed);
            let keys: Vec<KeyId> = (first..first + 500).map(KeyId::deletable).collect();
            if self.write_batch(self.random_origin(), keys.clone(), Why::Delete).await {
                written.extend(keys);
            } else {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
        let deletes: Vec<_> = written.into_iter().map(|key| self.delete(self.random_origin(), key)).collect();
        futures::stream::iter(deletes).buffer_unordered(16).filter(|acked| std::future::ready(*acked)).count().await
    }

    /// Runs every stream until [`stop`](Self::stop).
    pub async fn run(self: Arc<Self>) {
        let s = self.settings.clone();
        let edge = self.endpoints.edge.is_some();
        let burst = |w: &Workload| f64::from(w.burst.load(Ordering::Relaxed));
        let mut streams = tokio::task::JoinSet::new();
        let w = self.clone();
        streams.spawn(paced(
            self.clone(),
            move |_| s.write_rate,
            move || w.spawn(Target::Origin(0), Workload::write_and_follow),
        ));
        let (w, rate) = (self.clone(), s.read_rate);
        streams.spawn(paced(
            self.clone(),
            move |w| rate * burst(w),
            move || {
                w.spawn(Target::Origin(0), |w| async move {
                    let (target, key) = (w.random_origin(), w.random_key());
                    let why = if w.burst.load(Ordering::Relaxed) > 1 { Why::Burst } else { Why::Random };
                    w.lookup(target, key, why).await;
                })
            },
        ));
        if edge {
            let (w, rate) = (self.clone(), s.edge_read_rate);
            streams.spawn(paced(
                self.clone(),
                move |w| rate * burst(w),
                move || {
                    w.spawn(Target::Edge, |w| async move {
                        let key = w.random_key();
                        let why = if w.burst.load(Ordering::Relaxed) > 1 { Why::Burst } else { Why::Random };
                        w.lookup(Target::Edge, key, why).await;
                    })
                },
            ));
        }
        let (w, rate) = (self.clone(), s.batch_rate);
        streams.spawn(paced(
            self.clone(),
            move |_| rate,
            move || {
                w.spawn(Target::Origin(0), Workload::batch_and_follow);
                let edge = w.endpoints.edge.is_some() && w.with(|s| s.rng.random_bool(0.5));
                let to = if edge { Target::Edge } else { Target::Origin(0) };
                w.spawn(to, move |w| w.random_batch_lookup(edge));
            },
        ));
        if s.delete_rate > 0.0 {
            // Deletable keys are written once a second, enough for a second of deletes, and
            // deleted two seconds after their acknowledgement.
            let (w, rate) = (self.clone(), s.delete_rate);
            streams.spawn(paced(
                self.clone(),
                move |_| 1.0,
                move || {
                    let n = rate.ceil() as usize;
                    w.spawn(Target::Origin(0), move |w| w.write_deletables(n));
                },
            ));
            let w = self.clone();
            streams.spawn(paced(
                self.clone(),
                move |_| rate,
                move || {
                    let now = w.rec.now();
                    let due = w.with(|s| match s.to_delete.front() {
                        Some((_, at)) if now.saturating_sub(*at) >= 2_000_000 => {
                            s.to_delete.pop_front().map(|(k, _)| k)
                        }
                        _ => None,
                    });
                    if let Some(key) = due {
                        w.spawn(Target::Origin(0), move |w| async move {
                            w.delete(w.random_origin(), key).await;
                        });
                    }
                },
            ));
        }
        while streams.join_next().await.is_some() {}
    }

    /// Stops the streams (they end within a tick) and waits up to `limit` for operations in
    /// flight.
    pub async fn stop(&self, limit: Duration) {
        self.stopped.store(true, Ordering::SeqCst);
        let all = self.settings.max_in_flight as u32;
        let drained = futures::future::join(self.permits[0].acquire_many(all), self.permits[1].acquire_many(all));
        let _ = tokio::time::timeout(limit, drained).await;
    }
}

/// Calls `emit` `rate(w)` times per second on average, in 10 ms steps, until the workload
/// stops. A late step does not bring a burst of catching up beyond 100 ms worth.
async fn paced(w: Arc<Workload>, rate: impl Fn(&Workload) -> f64, mut emit: impl FnMut()) {
    let mut tick = tokio::time::interval(Duration::from_millis(10));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last = Instant::now();
    let mut budget = 0.0f64;
    while !w.stopped.load(Ordering::SeqCst) {
        tick.tick().await;
        let now = Instant::now();
        let r = rate(&w);
        budget = (budget + r * (now - last).as_secs_f64()).min(r * 0.1 + 1.0);
        last = now;
        while budget >= 1.0 {
            budget -= 1.0;
            emit();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_well_formed_answers_count_as_answers() {
        let seen = single_answer(200, Some("database"), r#"{"seen":true}"#).unwrap();
        assert_eq!(seen, Answer { seen: true, by: AnsweredBy::Database });
        let no = single_answer(404, None, r#"{"seen":false,"answered_by":"edge"}"#).unwrap();
        assert_eq!(no, Answer { seen: false, by: AnsweredBy::Edge });
        // A 404 problem (unknown filter), or a status that contradicts the body, is not one.
        assert_eq!(single_answer(404, None, r#"{"status":404,"detail":"no filter"}"#), None);
        assert_eq!(single_answer(200, None, r#"{"seen":false}"#), None);
        let asked = vec!["aa".to_owned(), "bb".to_owned()];
        let body = r#"{"results":[{"key":"AA","seen":true,"answered_by":"filter"},{"key":"bb","seen":false}]}"#;
        assert_eq!(batch_answers(body, &asked).unwrap().len(), 2);
        let swapped = r#"{"results":[{"key":"bb","seen":true},{"key":"aa","seen":false}]}"#;
        assert_eq!(batch_answers(swapped, &asked), None);
    }
}
