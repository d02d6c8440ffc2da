//! Writes during a run, and how soon the front sees them.
//!
//! [`write`] PUTs fresh keys through the origin's write API at a fixed total rate over a few
//! connections, each key once, for a fixed time: the load is bounded (rate × time keys, never
//! more than one request in flight per connection) and latency counts from when a write was
//! *due*, so a slow origin shows in the tail instead of lowering the rate.
//!
//! The freshness probe follows a sampled share of the acknowledged keys: each is polled at the
//! front (the edge) from its acknowledgement, every `interval`, until the front answers "seen".
//! Its lag is from the acknowledgement as the client got it, which is after the origin's, so the
//! lag is never over-stated by the client and a "not seen" asked for more than the bound after
//! it is a wrong answer for certain.

use crate::driver::{connect, latency_histogram, Errors, Sender, MAX_LATENCY_US};
use crate::stats::{per_second, quantile_ms};
use crate::workload::written_key;
use bloomgate_tests::origin::TOKEN;
use hdrhistogram::Histogram;
use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::Barrier;
use tokio::task::JoinHandle;

/// What to write and how fast.
#[derive(Clone, Debug)]
pub struct WriteSpec {
    /// Labels the keys: the same label and seed write the same keys.
    pub label: String,
    /// Seed of the keys.
    pub seed: u64,
    /// `http://host:port` of the origin.
    pub origin: String,
    /// Filter written to.
    pub filter: String,
    /// Keys per second, all connections together.
    pub rate: f64,
    /// Connections, each with at most one write in flight.
    pub connections: usize,
    /// How long to write (from when every connection is open).
    pub duration: Duration,
    /// Follow a share of the acknowledged keys at the front.
    pub probe: Option<ProbeSpec>,
}

/// The freshness probe's settings.
#[derive(Clone, Debug)]
pub struct ProbeSpec {
    /// `http://host:port` where keys are looked up (the edge, or the origin itself).
    pub front: String,
    /// Follow one acknowledged key in this many.
    pub every: u64,
    /// Time between two lookups of a followed key.
    pub interval: Duration,
    /// The front's freshness bound: "not seen" asked for later than this after the
    /// acknowledgement is a wrong answer.
    pub bound: Duration,
    /// Stop following a key this long after its acknowledgement: it never became "seen".
    pub cap: Duration,
    /// Follow only keys acknowledged within this long of the start, so every probe ends within
    /// the run and its lookups fall in the measured window.
    pub window: Duration,
}

/// What became of one followed key.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct ProbeOutcome {
    /// Acknowledgement to the first "seen" answer, ms; None = not seen within the cap.
    pub lag_ms: Option<f64>,
    /// Lookups made.
    pub polls: u64,
    /// "Not seen" answers to lookups sent after the bound: wrong answers.
    pub late_not_seen: u64,
    /// Lookups that failed, by kind.
    pub errors: Errors,
}

/// What one [`write`] measured.
pub struct WriteStats {
    /// Writes acknowledged (201).
    pub acked: u64,
    /// Failed writes.
    pub errors: Errors,
    /// Wall time, s.
    pub seconds: f64,
    /// Latency of acknowledged writes from when they were due, µs.
    pub latency_us: Histogram<u64>,
    /// The followed keys.
    pub probes: Vec<ProbeOutcome>,
}

impl WriteStats {
    /// Acknowledged writes per second.
    pub fn rate(&self) -> f64 {
        per_second(self.acked, self.seconds)
    }

    /// Latency quantile, ms.
    pub fn quantile_ms(&self, q: f64) -> f64 {
        quantile_ms(&self.latency_us, q)
    }
}

/// One PUT; Ok(status) once the body is read.
async fn put(sender: &mut Sender, authority: &str, path: &str) -> anyhow::Result<u16> {
    sender.ready().await?;
    let req = hyper::Request::put(path)
        .header(hyper::header::HOST, authority)
        .header(hyper::header::AUTHORIZATION, format!("Bearer {TOKEN}"))
        .body(Empty::<Bytes>::new())?;
    let resp = sender.send_request(req).await?;
    let status = resp.status().as_u16();
    resp.into_body().collect().await?;
    Ok(status)
}

/// Writes as `spec` says; returns once every write is answered and every probe has ended.
pub async fn write(spec: &WriteSpec) -> anyhow::Result<WriteStats> {
    anyhow::ensure!(spec.connections > 0 && spec.rate > 0.0, "writes need a connection and a rate");
    let authority = spec.origin.trim_start_matches("http://").trim_end_matches('/').to_owned();
    // Idle connections are dropped well before a server's keep-alive close (Node's, in front
    // of wrangler dev, is 5 s): a poll sent on a connection just as it closes would fail for
    // no fault of the front's.
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(64)
        .pool_idle_timeout(Duration::from_secs(2))
        .timeout(Duration::from_secs(30))
        .build()?;
    let shared = Writers {
        barrier: Arc::new(Barrier::new(spec.connections + 1)),
        start_cell: Arc::default(),
        acked: Arc::default(),
        probes: Arc::default(),
        http,
    };
    let mut tasks = Vec::with_capacity(spec.connections);
    for conn in 0..spec.connections {
        let sender = connect(&authority).await?;
        let (shared, authority, spec) = (shared.clone(), authority.clone(), spec.clone());
        tasks.push(tokio::spawn(async move { shared.run_connection(conn, sender, &authority, &spec).await }));
    }
    let start = Instant::now();
    shared.start_cell.set(start).expect("start set once");
    shared.barrier.wait().await;
    let mut errors = Errors::default();
    let mut latency_us = latency_histogram(3);
    for task in tasks {
        let (e, l) = task.await?;
        errors.add(&e);
        let _ = latency_us.add(&l);
    }
    let seconds = start.elapsed().as_secs_f64();
    let handles = std::mem::take(&mut *shared.probes.lock().unwrap_or_else(|e| e.into_inner()));
    let mut outcomes = Vec::with_capacity(handles.len());
    for h in handles {
        outcomes.push(h.await?);
    }
    Ok(WriteStats { acked: shared.acked.load(Relaxed), errors, seconds, latency_us, probes: outcomes })
}

/// What the connections of one [`write`] share: the start (set once every connection is
/// open), the count of acknowledged writes, the probes started, the probes' HTTP client.
#[derive(Clone)]
struct Writers {
    barrier: Arc<Barrier>,
    start_cell: Arc<std::sync::OnceLock<Instant>>,
    acked: Arc<AtomicU64>,
    probes: Arc<Mutex<Vec<JoinHandle<ProbeOutcome>>>>,
    http: reqwest::Client,
}

impl Writers {
    /// Connection `conn`'s writes, every `connections / rate`, offset so the connections
    /// interleave; its errors and latency.
    async fn run_connection(
        &self,
        conn: usize,
        mut sender: Sender,
        authority: &str,
        spec: &WriteSpec,
    ) -> (Errors, Histogram<u64>) {
        let prefix = format!("/v1/filters/{}/keys/", spec.filter);
        let mut errors = Errors::default();
        let mut latency = latency_histogram(3);
        self.barrier.wait().await;
        let start = *self.start_cell.get().expect("start set before the barrier");
        let deadline = start + spec.duration;
        let interval = Duration::from_secs_f64(spec.connections as f64 / spec.rate);
        let offset = interval.mul_f64(conn as f64 / spec.connections as f64);
        let mut n: u32 = 0;
        loop {
            let due = start + offset + interval * n;
            if due >= deadline {
                break;
            }
            tokio::time::sleep_until(due.into()).await;
            let key = written_key(spec.seed, &spec.label, conn as u64, u64::from(n));
            n += 1;
            match put(&mut sender, authority, &format!("{prefix}{key}")).await {
                Ok(201) => {
                    let acked_at = Instant::now();
                    let _ = latency.record((due.elapsed().as_micros() as u64).clamp(1, MAX_LATENCY_US));
                    self.acknowledged(spec, key, start, acked_at);
                }
                Ok(status) => errors.count_status(status),
                Err(_) => {
                    errors.io += 1;
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    if let Ok(s) = connect(authority).await {
                        sender = s;
                    }
                }
            }
        }
        (errors, latency)
    }

    /// Counts an acknowledged write, and follows its key if it is one of the probe's share.
    fn acknowledged(&self, spec: &WriteSpec, key: String, start: Instant, acked_at: Instant) {
        let nth = self.acked.fetch_add(1, Relaxed);
        if let Some(p) = &spec.probe {
            if nth.is_multiple_of(p.every.max(1)) && acked_at < start + p.window {
                let probe = follow(self.http.clone(), p.clone(), spec.filter.clone(), key, acked_at);
                self.probes.lock().unwrap_or_else(|e| e.into_inner()).push(tokio::spawn(probe));
            }
        }
    }
}

/// Looks `key` up at the front from `acked_at` on, every `interval`, until it is "seen" or
/// `cap` has passed.
async fn follow(http: reqwest::Client, p: ProbeSpec, filter: String, key: String, acked_at: Instant) -> ProbeOutcome {
    let url = format!("{}/v1/filters/{filter}/keys/{key}", p.front.trim_end_matches('/'));
    let mut out = ProbeOutcome::default();
    for poll in 0u32.. {
        let sent = Instant::now();
        let since = sent.duration_since(acked_at);
        if since > p.cap {
            break;
        }
        out.polls += 1;
        // The body is read so the connection goes back to the pool.
        let status = match http.get(&url).send().await {
            Ok(r) => {
                let status = r.status().as_u16();
                r.bytes().await.map(|_| status).ok()
            }
            Err(_) => None,
        };
        match status {
            Some(200) => {
                out.lag_ms = Some(acked_at.elapsed().as_secs_f64() * 1000.0);
                return out;
            }
            Some(404) => {
                if since > p.bound {
                    out.late_not_seen += 1;
                }
            }
            Some(status) => out.errors.count_status(status),
            None => out.errors.io += 1,
        }
        // On the grid from the acknowledgement: a slow answer does not push later polls back.
        let next = acked_at + p.interval * (poll + 1);
        tokio::time::sleep_until(next.max(Instant::now()).into()).await;
    }
    out
}

/// Quantile `q` of the lags of the probes that saw their key, ms.
pub fn lag_quantile_ms(probes: &[ProbeOutcome], q: f64) -> Option<f64> {
    let mut lags: Vec<f64> = probes.iter().filter_map(|p| p.lag_ms).collect();
    if lags.is_empty() {
        return None;
    }
    lags.sort_by(f64::total_cmp);
    // Nearest rank, as HDR histograms report.
    let rank = ((q * lags.len() as f64).ceil() as usize).clamp(1, lags.len());
    Some(lags[rank - 1])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lag_quantiles_are_nearest_rank_over_the_seen() {
        let p = |lag: Option<f64>| ProbeOutcome { lag_ms: lag, ..ProbeOutcome::default() };
        let probes: Vec<ProbeOutcome> = (1..=100).map(|i| p(Some(i as f64))).chain([p(None)]).collect();
        assert_eq!(lag_quantile_ms(&probes, 0.5), Some(50.0));
        assert_eq!(lag_quantile_ms(&probes, 0.99), Some(99.0));
        assert_eq!(lag_quantile_ms(&probes, 1.0), Some(100.0));
        assert_eq!(lag_quantile_ms(&[p(None)], 0.5), None);
    }
}
