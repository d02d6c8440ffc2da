//! The burst's load. Writers each keep one full batch write in flight (as many of the longest
//! keys as a batch takes, ~2 MiB of body), send the next as soon as one is stored, and retry a
//! refused batch after 100 ms: an impatient client, the worst case for the origin. Lookups of
//! keys never stored go on at a fixed rate throughout.

use bloomgate_tests::origin::TOKEN;
use bytes::Bytes;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::task::JoinHandle;

/// How long a writer waits before sending a refused batch again.
const RETRY_AFTER_REFUSAL: Duration = Duration::from_millis(100);

/// Answers counted by status (0 = no answer), and the requests with no answer by what failed.
#[derive(Clone, Default)]
pub struct Answers {
    statuses: Arc<Mutex<BTreeMap<u16, u64>>>,
    failures: Arc<Mutex<BTreeMap<String, u64>>>,
}

impl Answers {
    fn count(&self, status: u16) {
        *self.statuses.lock().expect("answers lock").entry(status).or_default() += 1;
    }

    /// A request that got no answer: counted as status 0, and by its error's innermost cause.
    fn failed(&self, error: &reqwest::Error) {
        self.count(0);
        let mut cause: &dyn std::error::Error = error;
        while let Some(inner) = cause.source() {
            cause = inner;
        }
        *self.failures.lock().expect("answers lock").entry(cause.to_string()).or_default() += 1;
    }

    /// The counts so far.
    pub fn by_status(&self) -> BTreeMap<u16, u64> {
        self.statuses.lock().expect("answers lock").clone()
    }

    /// The requests with no answer, by cause.
    pub fn failures(&self) -> BTreeMap<String, u64> {
        self.failures.lock().expect("answers lock").clone()
    }
}

/// The longest key hex allows, unique by writer, batch and position.
fn key(writer: usize, batch: u64, i: usize) -> String {
    let mut key = format!("{writer:08x}{batch:016x}{i:08x}");
    key.extend(std::iter::repeat_n('a', 2 * bloomgate_filter::MAX_KEY_BYTES - key.len()));
    key
}

fn keys(writer: usize, batch: u64, size: usize) -> Vec<String> {
    (0..size).map(|i| key(writer, batch, i)).collect()
}

/// The burst's writers, running until stopped.
pub struct Writers {
    /// Their answers.
    pub answers: Answers,
    /// The bytes of one batch body.
    pub body_bytes: usize,
    stop: Arc<AtomicBool>,
    tasks: Vec<JoinHandle<Vec<u64>>>,
    /// (writer, batch) of every batch acknowledged, once stopped.
    acknowledged: Vec<(usize, u64)>,
    batch_size: usize,
}

impl Writers {
    /// Starts `writers` writers, each on a connection of its own.
    pub fn start(base: &str, filter: &str, writers: usize) -> Writers {
        let batch_size = bloomgate_origin::config::Config::default().max_batch;
        let body_bytes = batch_body(0, 0, batch_size).len();
        let (answers, stop) = (Answers::default(), Arc::new(AtomicBool::new(false)));
        let url = format!("{base}{}", bloomgate_client::paths::keys(filter));
        let tasks = (0..writers)
            .map(|writer| tokio::spawn(write_until(writer, url.clone(), batch_size, answers.clone(), stop.clone())))
            .collect();
        Writers { answers, body_bytes, stop, tasks, acknowledged: Vec::new(), batch_size }
    }

    /// Stops them and waits for their last answers.
    pub async fn stop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for (writer, task) in self.tasks.drain(..).enumerate() {
            let batches = task.await.unwrap_or_default();
            self.acknowledged.extend(batches.into_iter().map(|b| (writer, b)));
        }
    }

    /// Looks up every key of every acknowledged batch: (keys checked, keys not seen).
    pub async fn check_stored(&self, client: &bloomgate_client::Client, filter: &str) -> anyhow::Result<(u64, u64)> {
        let (mut checked, mut lost) = (0, 0);
        for &(writer, batch) in &self.acknowledged {
            let answers = client.lookup_batch(filter, &keys(writer, batch, self.batch_size)).await?;
            checked += answers.results.len() as u64;
            lost += answers.results.iter().filter(|a| !a.seen).count() as u64;
        }
        Ok((checked, lost))
    }
}

fn batch_body(writer: usize, batch: u64, size: usize) -> Bytes {
    Bytes::from(serde_json::to_vec(&serde_json::json!({ "keys": keys(writer, batch, size) })).expect("keys serialize"))
}

/// One writer: the batches it had acknowledged.
async fn write_until(writer: usize, url: String, size: usize, answers: Answers, stop: Arc<AtomicBool>) -> Vec<u64> {
    let http = reqwest::Client::new();
    let mut acknowledged = Vec::new();
    let mut batch = 0;
    // A refused batch is sent again as it was, as a client retrying it would.
    let mut body = batch_body(writer, batch, size);
    while !stop.load(Ordering::SeqCst) {
        let sent = http.post(&url).bearer_auth(TOKEN).header("content-type", "application/json").body(body.clone());
        let status = match sent.send().await {
            Ok(response) => {
                let status = response.status().as_u16();
                let _ = response.bytes().await;
                answers.count(status);
                status
            }
            Err(e) => {
                answers.failed(&e);
                0
            }
        };
        if status == 200 {
            acknowledged.push(batch);
            batch += 1;
            body = batch_body(writer, batch, size);
        } else {
            tokio::time::sleep(RETRY_AFTER_REFUSAL).await;
        }
    }
    acknowledged
}

/// Lookups of keys never stored at `per_sec` in all, spread over four connections, until `stop`.
pub fn lookups(
    base: &str,
    filter: &str,
    per_sec: u32,
    answers: &Answers,
    stop: Arc<AtomicBool>,
) -> Vec<JoinHandle<()>> {
    const CONNECTIONS: u32 = 4;
    let every = Duration::from_secs_f64(f64::from(CONNECTIONS) / f64::from(per_sec.max(1)));
    (0..CONNECTIONS)
        .map(|_| {
            let (base, filter, answers, stop) = (base.to_owned(), filter.to_owned(), answers.clone(), stop.clone());
            tokio::spawn(async move {
                let http = reqwest::Client::new();
                let mut tick = tokio::time::interval(every);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                while !stop.load(Ordering::SeqCst) {
                    tick.tick().await;
                    let key = format!("{:016x}{:016x}", rand::random::<u64>(), rand::random::<u64>());
                    let url = format!("{base}{}", bloomgate_client::paths::key(&filter, &key));
                    match http.get(url).send().await {
                        Ok(r) => answers.count(r.status().as_u16()),
                        Err(e) => answers.failed(&e),
                    }
                }
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::key;

    #[test]
    fn keys_are_the_longest_hex_allows_and_unique_by_all_three() {
        let k = key(3, 7, 999);
        assert_eq!(k.len(), 2 * bloomgate_filter::MAX_KEY_BYTES);
        assert!(k.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_ne!(key(3, 7, 1), key(3, 8, 1));
        assert_ne!(key(3, 7, 1), key(4, 7, 1));
    }
}
