//! Drives one target over HTTP/1.1: N connections (one hyper connection each, no pool),
//! closed-loop or at a fixed total rate, for a duration or a number of lookups. Records an HDR
//! latency histogram, who answered, wrong answers and errors.
//!
//! At a fixed rate, requests fall due evenly (see [`crate::pacer`]) and latency counts from the
//! moment a request was *due*, not from when it was sent, so a stalled server shows up in the
//! tail instead of hiding it (coordinated omission).

use crate::pacer::{Pacer, Ticket};
use crate::stats::{per_second, quantile_ms};
use crate::workload::{KeyStream, Workload};
use anyhow::Context as _;
use hdrhistogram::Histogram;
use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use indicatif::{ProgressBar, ProgressStyle};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::net::TcpStream;

/// Header naming who answered (origin and edge).
const ANSWERED_BY: &str = "x-bloomgate-answered-by";
/// Latencies above this are clamped into the histogram's top bucket.
pub(super) const MAX_LATENCY_US: u64 = 60_000_000;

/// What to drive and how hard.
#[derive(Clone, Debug)]
pub struct DriveSpec {
    /// Label of the run: seeds its streams and makes its miss keys unique.
    pub label: String,
    /// `http://host:port` of the target.
    pub base: String,
    /// Filter to look keys up in.
    pub filter: String,
    /// Connections, each with one request in flight.
    pub connections: usize,
    /// Stop after this long (from when every connection is open).
    pub duration: Option<Duration>,
    /// Stop after this many lookups.
    pub max_lookups: Option<u64>,
    /// Total lookups per second; `None` = closed loop, as fast as answers come.
    pub rate: Option<f64>,
    /// Show a progress bar.
    pub progress: bool,
}

/// Errors by kind.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Errors {
    /// Connection refused, reset or broken mid-request.
    pub io: u64,
    /// 429 (overload refused).
    pub status_429: u64,
    /// 5xx.
    pub status_5xx: u64,
    /// Any other status than 200/404.
    pub status_other: u64,
}

impl Errors {
    /// All errors.
    pub fn total(&self) -> u64 {
        self.io + self.status_429 + self.status_5xx + self.status_other
    }

    /// Counts an answer with a status that is not the one asked for (200/404 for a lookup, 201
    /// for a write), by kind.
    pub(crate) fn count_status(&mut self, status: u16) {
        match status {
            429 => self.status_429 += 1,
            s if s >= 500 => self.status_5xx += 1,
            _ => self.status_other += 1,
        }
    }

    /// Adds `o`'s counts.
    pub(crate) fn add(&mut self, o: &Errors) {
        self.io += o.io;
        self.status_429 += o.status_429;
        self.status_5xx += o.status_5xx;
        self.status_other += o.status_other;
    }
}

/// What one drive measured.
pub struct DriveStats {
    /// Lookups answered 200 or 404.
    pub lookups: u64,
    /// Lookups of present keys (answered).
    pub hits: u64,
    /// Lookups of absent keys (answered).
    pub misses: u64,
    /// Answers to misses by the `x-bloomgate-answered-by` header: a miss answered by anyone
    /// but the first filter (`database` at the origin, not `edge` at the edge) is a false
    /// positive as the client sees it.
    pub misses_answered_by: BTreeMap<String, u64>,
    /// Answers by the `x-bloomgate-answered-by` header (`none` when absent).
    pub answered_by: BTreeMap<String, u64>,
    /// A present key answered 404 or an absent key answered 200.
    pub wrong_answers: u64,
    /// Failed requests.
    pub errors: Errors,
    /// Wall time of the measured part.
    pub seconds: f64,
    /// Latency of answered lookups, µs.
    pub latency_us: Histogram<u64>,
    /// Slowest answer per second of the run (by when it was due), µs.
    pub max_us_by_second: Vec<u64>,
    /// Latency of the answers per second of the run (by when they were due), µs: a tail per
    /// window, so a few seconds of a noisy host can be told from a server's steady tail.
    pub latency_by_second_us: Vec<Histogram<u64>>,
}

/// A window's tail is read only from this many answers or more (a p99 of fewer says little).
pub const MIN_WINDOW_ANSWERS: u64 = 1000;

/// An empty histogram of latencies (µs); `digits` significant digits.
pub(crate) fn latency_histogram(digits: u8) -> Histogram<u64> {
    Histogram::new_with_bounds(1, MAX_LATENCY_US, digits).expect("histogram bounds")
}

impl DriveStats {
    fn new() -> DriveStats {
        DriveStats {
            lookups: 0,
            hits: 0,
            misses: 0,
            misses_answered_by: BTreeMap::new(),
            answered_by: BTreeMap::new(),
            wrong_answers: 0,
            errors: Errors::default(),
            seconds: 0.0,
            latency_us: latency_histogram(3),
            max_us_by_second: Vec::new(),
            latency_by_second_us: Vec::new(),
        }
    }

    fn merge(&mut self, o: &DriveStats) {
        self.lookups += o.lookups;
        self.hits += o.hits;
        self.misses += o.misses;
        for (k, v) in &o.misses_answered_by {
            *self.misses_answered_by.entry(k.clone()).or_default() += v;
        }
        for (k, v) in &o.answered_by {
            *self.answered_by.entry(k.clone()).or_default() += v;
        }
        self.wrong_answers += o.wrong_answers;
        self.errors.add(&o.errors);
        let _ = self.latency_us.add(&o.latency_us);
        if self.max_us_by_second.len() < o.max_us_by_second.len() {
            self.max_us_by_second.resize(o.max_us_by_second.len(), 0);
        }
        for (m, v) in self.max_us_by_second.iter_mut().zip(&o.max_us_by_second) {
            *m = (*m).max(*v);
        }
        for (second, h) in o.latency_by_second_us.iter().enumerate() {
            let _ = self.window(second).add(h);
        }
    }

    /// The latency histogram of second `second` of the run, created on first use.
    fn window(&mut self, second: usize) -> &mut Histogram<u64> {
        if self.latency_by_second_us.len() <= second {
            self.latency_by_second_us.resize_with(second + 1, || latency_histogram(2));
        }
        &mut self.latency_by_second_us[second]
    }

    /// Latency quantile `q` of each one-second window of the run holding at least
    /// [`MIN_WINDOW_ANSWERS`] answers, in ms, in order.
    pub fn window_quantiles_ms(&self, q: f64) -> Vec<f64> {
        self.latency_by_second_us.iter().filter(|h| h.len() >= MIN_WINDOW_ANSWERS).map(|h| quantile_ms(h, q)).collect()
    }

    /// One lookup answered 200 (`seen`) or 404, `due` at its time since `start`.
    fn record_answer(&mut self, start: Instant, due: Instant, seen: bool, present: bool, by: Option<String>) {
        let us = (due.elapsed().as_micros() as u64).clamp(1, MAX_LATENCY_US);
        let _ = self.latency_us.record(us);
        let second = due.saturating_duration_since(start).as_secs() as usize;
        if self.max_us_by_second.len() <= second {
            self.max_us_by_second.resize(second + 1, 0);
        }
        self.max_us_by_second[second] = self.max_us_by_second[second].max(us);
        let _ = self.window(second).record(us);
        self.lookups += 1;
        if seen != present {
            self.wrong_answers += 1;
        }
        let by = by.unwrap_or_else(|| "none".into());
        if present {
            self.hits += 1;
        } else {
            self.misses += 1;
            *self.misses_answered_by.entry(by.clone()).or_default() += 1;
        }
        *self.answered_by.entry(by).or_default() += 1;
    }

    /// Answered lookups per second.
    pub fn rate(&self) -> f64 {
        per_second(self.lookups, self.seconds)
    }

    /// Latency quantile in ms.
    pub fn quantile_ms(&self, q: f64) -> f64 {
        quantile_ms(&self.latency_us, q)
    }
}

/// One HTTP/1.1 connection's request half.
pub(super) type Sender = SendRequest<Empty<Bytes>>;

/// Opens one HTTP/1.1 connection (no pool, Nagle off).
pub(super) async fn connect(authority: &str) -> anyhow::Result<Sender> {
    let stream = TcpStream::connect(authority).await.with_context(|| format!("connect {authority}"))?;
    stream.set_nodelay(true)?;
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(sender)
}

/// One request: Ok((status, answered_by)) once the body is read.
async fn lookup(sender: &mut Sender, authority: &str, path: &str) -> anyhow::Result<(u16, Option<String>)> {
    sender.ready().await?;
    let req = hyper::Request::get(path).header(hyper::header::HOST, authority).body(Empty::<Bytes>::new())?;
    let resp = sender.send_request(req).await?;
    let status = resp.status().as_u16();
    let by = resp.headers().get(ANSWERED_BY).and_then(|v| v.to_str().ok()).map(str::to_owned);
    resp.into_body().collect().await?;
    Ok((status, by))
}

/// Drives the target as `spec` says; every connection is opened before the clock starts.
pub async fn drive(spec: &DriveSpec, workload: &Workload) -> anyhow::Result<DriveStats> {
    anyhow::ensure!(spec.connections > 0, "at least one connection");
    anyhow::ensure!(spec.duration.is_some() || spec.max_lookups.is_some(), "a duration or a number of lookups");
    let authority = spec.base.trim_start_matches("http://").trim_end_matches('/').to_owned();
    let mut senders = Vec::with_capacity(spec.connections);
    for _ in 0..spec.connections {
        senders.push(connect(&authority).await?);
    }
    let start = Instant::now();
    let pacer = spec.rate.map(|rate| {
        let tickets = spec.duration.map_or(u64::MAX, |d| Pacer::tickets_in(d, rate));
        Pacer::new(start, rate, tickets.min(spec.max_lookups.unwrap_or(u64::MAX)))
    });
    let pacing = pacer.clone().map(|pacer| {
        let connections = spec.connections;
        std::thread::spawn(move || pacer.run(connections))
    });
    let clock = Clock {
        start,
        deadline: spec.duration.map(|d| start + d),
        pacer: pacer.clone(),
        issued: Arc::new(AtomicU64::new(0)),
        done: Arc::new(AtomicU64::new(0)),
    };
    let mut tasks = Vec::with_capacity(spec.connections);
    for (conn, sender) in senders.into_iter().enumerate() {
        let keys = workload.stream(&spec.label, conn);
        let (clock, authority, spec) = (clock.clone(), authority.clone(), spec.clone());
        tasks.push(tokio::spawn(async move { clock.run_connection(sender, &authority, &spec, keys).await }));
    }
    let progress = spec.progress.then(|| progress_bar(spec));
    let ticker = progress.clone().map(|bar| tick(bar, clock.done.clone(), start, spec.duration));
    let mut total = DriveStats::new();
    for task in tasks {
        let stats = task.await;
        if let (Err(_), Some(pacer)) = (&stats, &pacer) {
            pacer.stop();
        }
        total.merge(&stats?);
    }
    total.seconds = start.elapsed().as_secs_f64();
    if let Some(thread) = pacing {
        thread.join().map_err(|_| anyhow::anyhow!("the pacing thread panicked"))?;
    }
    if let Some(t) = ticker {
        t.abort();
    }
    if let Some(bar) = progress {
        bar.finish_with_message(format!(
            "{} lookups, {:.0}/s, {} errors",
            total.lookups,
            total.rate(),
            total.errors.total()
        ));
    }
    Ok(total)
}

/// When the connections of one drive send: the start, the end (a deadline or a number of
/// lookups), the pacer at a fixed rate; and what they have done so far.
#[derive(Clone)]
struct Clock {
    start: Instant,
    deadline: Option<Instant>,
    pacer: Option<Arc<Pacer>>,
    /// Lookups taken by closed-loop connections, against `max_lookups`.
    issued: Arc<AtomicU64>,
    /// Lookups answered, for the progress bar.
    done: Arc<AtomicU64>,
}

impl Clock {
    /// When the next lookup is due (now, in a closed loop); None once the drive is over.
    async fn next_due(&self, max_lookups: Option<u64>) -> Option<Instant> {
        match &self.pacer {
            Some(pacer) => match pacer.next().await {
                Ticket::Send { due } => Some(due),
                Ticket::Done => None,
            },
            None => {
                let now = Instant::now();
                let over = self.deadline.is_some_and(|d| now >= d)
                    || max_lookups.is_some_and(|max| self.issued.fetch_add(1, Relaxed) >= max);
                (!over).then_some(now)
            }
        }
    }

    /// One connection's lookups until the drive is over; what it measured.
    async fn run_connection(
        self,
        mut sender: Sender,
        authority: &str,
        spec: &DriveSpec,
        mut keys: KeyStream,
    ) -> DriveStats {
        let prefix = format!("/v1/filters/{}/keys/", spec.filter);
        let mut stats = DriveStats::new();
        while let Some(due) = self.next_due(spec.max_lookups).await {
            let (key, present) = keys.next_key();
            let path = format!("{prefix}{key}");
            match lookup(&mut sender, authority, &path).await {
                Ok((status @ (200 | 404), by)) => {
                    stats.record_answer(self.start, due, status == 200, present, by);
                    self.done.fetch_add(1, Relaxed);
                }
                Ok((status, _)) => stats.errors.count_status(status),
                Err(_) => {
                    stats.errors.io += 1;
                    // Back off a little so a dead target is not a busy loop.
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    match connect(authority).await {
                        Ok(s) => sender = s,
                        Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
                    }
                }
            }
        }
        stats
    }
}

/// A progress bar over the drive's length (or its number of lookups).
fn progress_bar(spec: &DriveSpec) -> ProgressBar {
    let bar = match (spec.duration, spec.max_lookups) {
        (Some(d), _) => ProgressBar::new(d.as_millis() as u64),
        (None, Some(n)) => ProgressBar::new(n),
        (None, None) => ProgressBar::hidden(),
    };
    bar.set_style(
        ProgressStyle::with_template("{prefix:>28} [{bar:30}] {msg}").expect("template").progress_chars("=> "),
    );
    bar.set_prefix(spec.label.clone());
    bar
}

/// Moves `bar` on four times a second until aborted.
fn tick(
    bar: ProgressBar,
    done: Arc<AtomicU64>,
    start: Instant,
    duration: Option<Duration>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_millis(250)).await;
            let n = done.load(Relaxed);
            let secs = start.elapsed().as_secs_f64();
            bar.set_position(match duration {
                Some(_) => start.elapsed().as_millis() as u64,
                None => n,
            });
            bar.set_message(format!("{n} lookups, {:.0}/s", n as f64 / secs));
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Stats of one connection that answered `answers` (latency µs, count) in second `second`.
    fn answered(second: usize, answers: &[(u64, u64)]) -> DriveStats {
        let mut stats = DriveStats::new();
        for &(us, n) in answers {
            let _ = stats.window(second).record_n(us, n);
        }
        stats
    }

    #[test]
    fn each_full_second_has_its_own_tail_and_thin_seconds_are_left_out() {
        let mut total = DriveStats::new();
        // Second 0: 2 % of answers at 50 ms (its p99 is theirs); second 1: too few answers to
        // read a p99 from; second 2: all at 0.2 ms, from two connections merged.
        total.merge(&answered(0, &[(100, 980), (50_000, 20)]));
        total.merge(&answered(1, &[(30_000, MIN_WINDOW_ANSWERS - 1)]));
        total.merge(&answered(2, &[(200, 600)]));
        total.merge(&answered(2, &[(200, 600)]));
        let p99s = total.window_quantiles_ms(0.99);
        assert_eq!(p99s.len(), 2, "{p99s:?}");
        assert!((p99s[0] - 50.0).abs() < 1.0, "{p99s:?}");
        assert!((p99s[1] - 0.2).abs() < 0.01, "{p99s:?}");
    }
}
