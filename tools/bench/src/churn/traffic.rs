//! The churn run's traffic: lookups at a fixed rate (single keys and 20-key batches, stored
//! and absent keys) and writes of fresh keys at a fixed rate, every answer checked.
//!
//! A "not seen" is wrong for a key stored before the run, or acknowledged more than S before
//! the lookup was sent; a "seen" is wrong for a key never written (absent keys are random).
//! Answers the edge could not give (5xx: the origin did not answer in time) are errors, not
//! wrong answers; they are counted and reported.

use bloomgate_tests::origin::TestOrigin;
use bloomgate_tests::random_keys;
use rand::Rng;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Keys per batch lookup.
const BATCH_KEYS: usize = 20;
/// Most lookups in flight; more are skipped and counted.
const MAX_IN_FLIGHT: u64 = 64;

/// Each filter's stored keys: preloaded, and written during the run with their
/// acknowledgement time.
pub struct Stored {
    /// The filters.
    pub filters: Vec<String>,
    preloaded: Vec<Vec<String>>,
    written: Mutex<Vec<Vec<(String, Instant)>>>,
    bound: Duration,
}

impl Stored {
    /// Filters with their preloaded keys; writes count as stored `bound` (S) after their
    /// acknowledgement.
    pub fn new(filters: Vec<String>, preloaded: Vec<Vec<String>>, bound: Duration) -> Stored {
        let written = Mutex::new(vec![Vec::new(); filters.len()]);
        Stored { filters, preloaded, written, bound }
    }

    /// A stored key of filter `f` (preloaded or written, half and half once there are writes),
    /// and since when a "not seen" for it is wrong (None: always).
    fn pick(&self, f: usize, rng: &mut impl Rng) -> (String, Option<Instant>) {
        let written = self.written.lock().unwrap_or_else(|e| e.into_inner());
        if !written[f].is_empty() && rng.random_bool(0.5) {
            let (key, acked) = &written[f][rng.random_range(0..written[f].len())];
            return (key.clone(), Some(*acked + self.bound));
        }
        (self.preloaded[f][rng.random_range(0..self.preloaded[f].len())].clone(), None)
    }

    fn acknowledged(&self, f: usize, key: String) {
        self.written.lock().unwrap_or_else(|e| e.into_inner())[f].push((key, Instant::now()));
    }
}

/// What the traffic did and saw.
#[derive(Debug, Default)]
pub struct Tally {
    /// Lookup requests sent (a batch is one).
    pub requests: AtomicU64,
    /// Keys looked up.
    pub keys: AtomicU64,
    /// Keys answered "not seen" by the edge itself.
    pub edge_no: AtomicU64,
    /// Wrong answers (see the module doc).
    pub wrong: AtomicU64,
    /// 5xx answers.
    pub unavailable: AtomicU64,
    /// No answer (connection error or timeout).
    pub io: AtomicU64,
    /// Lookups skipped because too many were in flight.
    pub skipped: AtomicU64,
    /// Writes acknowledged.
    pub writes: AtomicU64,
    /// Writes that failed.
    pub write_errors: AtomicU64,
    in_flight: AtomicU64,
}

/// One key's expectation: stored (a "not seen" is wrong from `since`, None = always) or absent.
#[derive(Clone, Copy)]
enum Expect {
    Stored(Option<Instant>),
    Absent,
}

impl Expect {
    fn wrong(self, seen: bool, sent: Instant) -> bool {
        match self {
            Expect::Stored(since) => !seen && since.is_none_or(|since| sent >= since),
            Expect::Absent => seen,
        }
    }
}

fn key_for(stored: &Stored, f: usize, hit_share: f64, rng: &mut impl Rng) -> (String, Expect) {
    if rng.random_bool(hit_share) {
        let (key, since) = stored.pick(f, rng);
        (key, Expect::Stored(since))
    } else {
        (random_keys(1).remove(0), Expect::Absent)
    }
}

/// Lookups at `rate` requests a second until `until`: `batch_share` of them 20-key batches (a
/// third of their keys stored), the rest single keys (`hit_share` of them stored).
pub async fn lookups(
    edge: String,
    stored: Arc<Stored>,
    tally: Arc<Tally>,
    (rate, batch_share, hit_share): (f64, f64, f64),
    until: Instant,
) {
    let http = reqwest::Client::builder().timeout(Duration::from_secs(15)).build().expect("client");
    paced(rate, until, |_| {
        if tally.in_flight.load(Relaxed) >= MAX_IN_FLIGHT {
            tally.skipped.fetch_add(1, Relaxed);
            return;
        }
        let mut rng = rand::rng();
        let f = rng.random_range(0..stored.filters.len());
        let url = format!("{edge}/v1/filters/{}", stored.filters[f]);
        let (http, stored, tally) = (http.clone(), stored.clone(), tally.clone());
        tally.in_flight.fetch_add(1, Relaxed);
        tally.requests.fetch_add(1, Relaxed);
        if rng.random_bool(batch_share) {
            let keys: Vec<(String, Expect)> =
                (0..BATCH_KEYS).map(|_| key_for(&stored, f, 1.0 / 3.0, &mut rng)).collect();
            tokio::spawn(async move { batch(&http, &url, &keys, &tally).await });
        } else {
            let (key, expect) = key_for(&stored, f, hit_share, &mut rng);
            tokio::spawn(async move { single(&http, &format!("{url}/keys/{key}"), expect, &tally).await });
        }
    })
    .await;
}

/// Calls `each(n)` for the n-th tick of `rate` a second, on time, until `until`.
async fn paced(rate: f64, until: Instant, mut each: impl FnMut(u64)) {
    let interval = Duration::from_secs_f64(1.0 / rate.max(0.01));
    let started = Instant::now();
    for n in 0u64.. {
        let due = started + interval.mul_f64(n as f64);
        if due >= until {
            break;
        }
        tokio::time::sleep_until(due.into()).await;
        each(n);
    }
}

async fn single(http: &reqwest::Client, url: &str, expect: Expect, tally: &Tally) {
    let sent = Instant::now();
    tally.keys.fetch_add(1, Relaxed);
    match http.get(url).send().await {
        Ok(r) => {
            let status = r.status().as_u16();
            let by_edge = r.headers().get("x-bloomgate-answered-by").is_some_and(|v| v == "edge");
            let _ = r.bytes().await;
            match status {
                200 | 404 => {
                    tally.edge_no.fetch_add(u64::from(by_edge), Relaxed);
                    tally.wrong.fetch_add(u64::from(expect.wrong(status == 200, sent)), Relaxed);
                }
                _ => {
                    tally.unavailable.fetch_add(1, Relaxed);
                }
            }
        }
        Err(_) => {
            tally.io.fetch_add(1, Relaxed);
        }
    }
    tally.in_flight.fetch_sub(1, Relaxed);
}

async fn batch(http: &reqwest::Client, url: &str, keys: &[(String, Expect)], tally: &Tally) {
    let sent = Instant::now();
    tally.keys.fetch_add(keys.len() as u64, Relaxed);
    let names: Vec<&str> = keys.iter().map(|(k, _)| k.as_str()).collect();
    let answer = http.post(format!("{url}/lookups")).json(&serde_json::json!({ "keys": names })).send().await;
    match answer {
        Ok(r) if r.status().is_success() => {
            let body: serde_json::Value = r.json().await.unwrap_or_default();
            let results = body["results"].as_array().cloned().unwrap_or_default();
            if results.len() != keys.len() {
                tally.unavailable.fetch_add(1, Relaxed);
            }
            for ((_, expect), result) in keys.iter().zip(&results) {
                let seen = result["seen"].as_bool().unwrap_or(true);
                tally.edge_no.fetch_add(u64::from(result["answered_by"] == "edge"), Relaxed);
                tally.wrong.fetch_add(u64::from(expect.wrong(seen, sent)), Relaxed);
            }
        }
        Ok(_) => {
            tally.unavailable.fetch_add(1, Relaxed);
        }
        Err(_) => {
            tally.io.fetch_add(1, Relaxed);
        }
    }
    tally.in_flight.fetch_sub(1, Relaxed);
}

/// Writes of fresh keys at `rate` a second until `until`, round-robin over the filters, through
/// the origin's write API; each acknowledged key becomes stored.
pub async fn writes(origin: Arc<TestOrigin>, stored: Arc<Stored>, tally: Arc<Tally>, rate: f64, until: Instant) {
    if rate <= 0.0 {
        return;
    }
    paced(rate, until, |n| {
        let f = (n % stored.filters.len() as u64) as usize;
        let key = random_keys(1).remove(0);
        let (origin, stored, tally) = (origin.clone(), stored.clone(), tally.clone());
        tokio::spawn(async move {
            match origin.client.insert(&stored.filters[f], &key, b"").await {
                Ok(_) => {
                    tally.writes.fetch_add(1, Relaxed);
                    stored.acknowledged(f, key);
                }
                Err(_) => {
                    tally.write_errors.fetch_add(1, Relaxed);
                }
            }
        });
    })
    .await;
}
