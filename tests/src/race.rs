//! The race that breaks a Bloom gate under change: a key written through one origin and read
//! at once through another, while rebuilds, recoveries and faults move the filter under them.
//! Writers run at a bounded rate (the same test on a fast or a slow machine), every write and
//! read is recorded with its outcome, and the result says how many acknowledged keys were
//! answered "not seen".

use crate::origin::{TestOrigin, TOKEN};
use reqwest::StatusCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What the writers saw.
#[derive(Debug, Default, Clone)]
pub struct RaceResult {
    /// Keys acknowledged (201).
    pub acked: Vec<String>,
    /// Writes refused with 503/429 (retryable; not acknowledged).
    pub refused: u64,
    /// Reads right after an acknowledgement, through another origin.
    pub reads: u64,
    /// Acknowledged keys read back as "not seen": (key, who answered). Must stay empty.
    pub false_negatives: Vec<(String, String)>,
    /// Reads that failed (503/429), allowed under faults.
    pub read_errors: u64,
    /// Anything else: statuses no request should get.
    pub unexpected: Vec<String>,
}

/// Writers running the race until stopped.
pub struct Race {
    stop: Arc<AtomicBool>,
    result: Arc<Mutex<RaceResult>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Race {
    /// Starts `writers` writers, each writing one key every `every` through origin `i` and
    /// reading it back at once through origin `i + 1` (round robin over `origins`).
    pub fn start(origins: Vec<Arc<TestOrigin>>, filter: &str, writers: usize, every: Duration) -> Race {
        let stop = Arc::new(AtomicBool::new(false));
        let result = Arc::new(Mutex::new(RaceResult::default()));
        let tasks = (0..writers)
            .map(|w| {
                let (origins, filter, stop, result) =
                    (origins.clone(), filter.to_owned(), stop.clone(), result.clone());
                tokio::spawn(async move {
                    let mut tick = tokio::time::interval(every);
                    let mut i = w;
                    while !stop.load(Ordering::SeqCst) {
                        tick.tick().await;
                        i += 1;
                        let (via, back) = (&origins[i % origins.len()], &origins[(i + 1) % origins.len()]);
                        write_then_read(via, back, &filter, &result).await;
                    }
                })
            })
            .collect();
        Race { stop, result, tasks }
    }

    /// Stops the writers and returns what they saw.
    pub async fn finish(self) -> RaceResult {
        self.stop.store(true, Ordering::SeqCst);
        for task in self.tasks {
            task.await.expect("writer panicked");
        }
        let result = self.result.lock().unwrap().clone();
        result
    }

    /// Keys acknowledged so far.
    pub fn acked_so_far(&self) -> usize {
        self.result.lock().unwrap().acked.len()
    }
}

async fn write_then_read(via: &TestOrigin, back: &TestOrigin, filter: &str, result: &Mutex<RaceResult>) {
    let key = crate::random_keys(1).remove(0);
    let put = via
        .http
        .put(format!("{}/v1/filters/{filter}/keys/{key}", via.base))
        .bearer_auth(TOKEN)
        .timeout(Duration::from_secs(30))
        .send()
        .await;
    match put.as_ref().map(|r| r.status()) {
        Ok(StatusCode::CREATED) => {}
        Ok(StatusCode::SERVICE_UNAVAILABLE | StatusCode::TOO_MANY_REQUESTS) => {
            result.lock().unwrap().refused += 1;
            return;
        }
        other => {
            result.lock().unwrap().unexpected.push(format!("PUT {key}: {other:?}"));
            return;
        }
    }
    result.lock().unwrap().acked.push(key.clone());
    let get = back.http.get(format!("{}/v1/filters/{filter}/keys/{key}", back.base)).send().await;
    let mut r = result.lock().unwrap();
    r.reads += 1;
    match get {
        Ok(resp) if resp.status() == StatusCode::OK => {}
        Ok(resp) if resp.status() == StatusCode::NOT_FOUND => {
            let by = resp.headers().get("x-bloomgate-answered-by").and_then(|v| v.to_str().ok()).unwrap_or("?");
            r.false_negatives.push((key, by.to_owned()));
        }
        Ok(resp)
            if matches!(resp.status(), StatusCode::SERVICE_UNAVAILABLE | StatusCode::TOO_MANY_REQUESTS)
                && resp.headers().contains_key("retry-after") =>
        {
            r.read_errors += 1
        }
        other => r.unexpected.push(format!("GET {key}: {:?}", other.map(|r| r.status()))),
    }
}
