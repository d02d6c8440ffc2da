//! A database reached in the background. An origin whose database is down when it starts
//! still starts: it serves liveness, answers readiness with why the database does not answer,
//! answers "no" from the filter meanwhile, and connects with backoff until the database
//! answers. Until then every call fails as a database outage does (503, never a "no").

use super::{Database, DatabaseError, Dropped, FilterDef, KeySink};
use crate::cluster_version::{ClusterVersion, LiveOrigin};
use crate::store::checkpoint::{Checkpoint, SavedSegment};
use async_trait::async_trait;
use std::future::Future;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

/// The first wait between attempts; doubled after each failure up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(500);
/// The longest wait between attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(10);

/// A database that answers once its first connection is made.
pub struct ConnectingDatabase {
    connected: OnceLock<Arc<dyn Database>>,
    /// Why the last attempt failed (what every call says until one succeeds).
    last_error: Mutex<String>,
    /// Attempts made so far (woken after each, the successful one included).
    attempts: tokio::sync::watch::Sender<u32>,
}

impl ConnectingDatabase {
    /// Connects with `connect`, returning once the first attempt has ended: connected if the
    /// database answered, else still connecting in the background, retried with backoff
    /// until it succeeds.
    pub async fn start<F, Fut>(what: &'static str, connect: F) -> Arc<ConnectingDatabase>
    where
        F: Fn() -> Fut + Send + 'static,
        Fut: Future<Output = Result<Arc<dyn Database>, DatabaseError>> + Send,
    {
        let database = ConnectingDatabase::spawn_with_backoff(what, FIRST_BACKOFF, connect);
        let mut attempts = database.attempts.subscribe();
        let _ = attempts.wait_for(|n| *n >= 1).await;
        database
    }

    /// Starts connecting in the background, waiting `first_backoff` after the first failure.
    fn spawn_with_backoff<F, Fut>(what: &'static str, first_backoff: Duration, connect: F) -> Arc<ConnectingDatabase>
    where
        F: Fn() -> Fut + Send + 'static,
        Fut: Future<Output = Result<Arc<dyn Database>, DatabaseError>> + Send,
    {
        let database = Arc::new(ConnectingDatabase {
            connected: OnceLock::new(),
            last_error: Mutex::new(format!("{what} is not connected yet")),
            attempts: tokio::sync::watch::Sender::new(0),
        });
        let connecting = database.clone();
        tokio::spawn(async move {
            let mut backoff = first_backoff;
            loop {
                match connect().await {
                    Ok(connected) => {
                        tracing::info!("connected to {what}");
                        let _ = connecting.connected.set(connected);
                        connecting.attempts.send_modify(|n| *n += 1);
                        return;
                    }
                    Err(e) => {
                        tracing::warn!(cause = %e, retry_in_ms = backoff.as_millis() as u64, "{what} does not answer; retrying");
                        let why = match &e {
                            DatabaseError::Error(why) => why.clone(),
                            other => other.to_string(),
                        };
                        *lock(&connecting.last_error) =
                            format!("{why} (retrying every {} s at most)", MAX_BACKOFF.as_secs());
                        connecting.attempts.send_modify(|n| *n += 1);
                    }
                }
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        });
        database
    }

    /// Waits until connected, or `limit` has passed (then errs with why it is not).
    pub async fn connected(&self, limit: Duration) -> Result<Arc<dyn Database>, DatabaseError> {
        let mut attempts = self.attempts.subscribe();
        let _ = tokio::time::timeout(limit, attempts.wait_for(|_| self.connected.get().is_some())).await;
        self.database()
    }

    fn database(&self) -> Result<Arc<dyn Database>, DatabaseError> {
        self.connected.get().cloned().ok_or_else(|| DatabaseError::Error(lock(&self.last_error).clone()))
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[async_trait]
impl Database for ConnectingDatabase {
    async fn get(&self, filter: &str, key: &[u8]) -> Result<Option<Vec<u8>>, DatabaseError> {
        self.database()?.get(filter, key).await
    }

    async fn put(&self, filter: &str, key: &[u8], value: &[u8]) -> Result<(), DatabaseError> {
        self.database()?.put(filter, key, value).await
    }

    async fn delete(&self, filter: &str, key: &[u8]) -> Result<bool, DatabaseError> {
        self.database()?.delete(filter, key).await
    }

    async fn scan_keys(&self, filter: &str, concurrency: usize, sink: KeySink<'_>) -> Result<u64, DatabaseError> {
        self.database()?.scan_keys(filter, concurrency, sink).await
    }

    async fn filters(&self) -> Result<Vec<FilterDef>, DatabaseError> {
        self.database()?.filters().await
    }

    async fn resize_filter(&self, name: &str, capacity: u64, fp_rate: f64) -> Result<(), DatabaseError> {
        self.database()?.resize_filter(name, capacity, fp_rate).await
    }

    async fn create_filter(&self, def: &FilterDef) -> Result<(FilterDef, bool), DatabaseError> {
        self.database()?.create_filter(def).await
    }

    async fn drop_filter(&self, name: &str, dropped: Dropped) -> Result<bool, DatabaseError> {
        self.database()?.drop_filter(name, dropped).await
    }

    async fn dropped(&self, name: &str) -> Result<Option<Dropped>, DatabaseError> {
        self.database()?.dropped(name).await
    }

    async fn has_keys(&self, filter: &str) -> Result<bool, DatabaseError> {
        self.database()?.has_keys(filter).await
    }

    async fn delete_keys(&self, filter: &str, concurrency: usize) -> Result<u64, DatabaseError> {
        self.database()?.delete_keys(filter, concurrency).await
    }

    async fn filter(&self, name: &str) -> Result<Option<FilterDef>, DatabaseError> {
        self.database()?.filter(name).await
    }

    async fn ping(&self) -> Result<(), DatabaseError> {
        self.database()?.ping().await
    }

    async fn cluster_version(&self) -> Result<ClusterVersion, DatabaseError> {
        self.database()?.cluster_version().await
    }

    async fn raise_cluster_version(&self, from: u32, to: u32) -> Result<bool, DatabaseError> {
        self.database()?.raise_cluster_version(from, to).await
    }

    async fn report_origin(&self, report: &LiveOrigin) -> Result<(), DatabaseError> {
        self.database()?.report_origin(report).await
    }

    async fn origin_reports(&self) -> Result<Vec<LiveOrigin>, DatabaseError> {
        self.database()?.origin_reports().await
    }

    async fn log_recent_writes(&self, filter: &str, keys: &[&[u8]], at_ms: u64) -> Result<(), DatabaseError> {
        self.database()?.log_recent_writes(filter, keys, at_ms).await
    }

    async fn recent_writes_in(&self, filter: &str, bucket: i64) -> Result<Vec<Vec<u8>>, DatabaseError> {
        self.database()?.recent_writes_in(filter, bucket).await
    }

    async fn checkpoint(&self, filter: &str) -> Result<Option<Checkpoint>, DatabaseError> {
        self.database()?.checkpoint(filter).await
    }

    async fn saved_segments(&self, filter: &str, generation: u64) -> Result<Vec<SavedSegment>, DatabaseError> {
        self.database()?.saved_segments(filter, generation).await
    }

    async fn save_segment(
        &self,
        filter: &str,
        generation: u64,
        segment: SavedSegment,
        bits: &[u8],
        read_at_ms: u64,
    ) -> Result<(), DatabaseError> {
        self.database()?.save_segment(filter, generation, segment, bits, read_at_ms).await
    }

    async fn saved_segment_bits(
        &self,
        filter: &str,
        generation: u64,
        index: u32,
    ) -> Result<Option<Vec<u8>>, DatabaseError> {
        self.database()?.saved_segment_bits(filter, generation, index).await
    }

    async fn record_checkpoint(&self, filter: &str, checkpoint: Checkpoint) -> Result<(), DatabaseError> {
        self.database()?.record_checkpoint(filter, checkpoint).await
    }

    async fn forget_saved_segments(&self, filter: &str, generation: u64) -> Result<(), DatabaseError> {
        self.database()?.forget_saved_segments(filter, generation).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::embedded::RedbDatabase;

    /// Short waits between attempts: the test's time is real.
    const QUICK: Duration = Duration::from_millis(5);

    /// One connect attempt, as `spawn` takes them.
    type Attempt = futures::future::BoxFuture<'static, Result<Arc<dyn Database>, DatabaseError>>;

    /// A connect whose every attempt waits for the test to say how it ends (true: connected),
    /// so what the test sees never depends on how fast the machine is.
    fn connect_when_told(path: std::path::PathBuf) -> (tokio::sync::mpsc::UnboundedSender<bool>, impl Fn() -> Attempt) {
        let (tell, told) = tokio::sync::mpsc::unbounded_channel::<bool>();
        let told = Arc::new(tokio::sync::Mutex::new(told));
        let connect = move || {
            let (told, path) = (told.clone(), path.clone());
            Box::pin(async move {
                match told.lock().await.recv().await {
                    Some(true) => {
                        Ok(Arc::new(RedbDatabase::open(&path).map_err(DatabaseError::other)?) as Arc<dyn Database>)
                    }
                    _ => Err(DatabaseError::other("connection refused")),
                }
            }) as Attempt
        };
        (tell, connect)
    }

    #[tokio::test]
    async fn calls_fail_with_why_until_the_database_answers_then_reach_it() {
        let dir = std::env::temp_dir().join(format!("bloomgate-connecting-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (tell, connect) = connect_when_told(dir.join("keys.redb"));
        let database = ConnectingDatabase::spawn_with_backoff("the test database", QUICK, connect);
        let attempts = |n: u32| {
            let mut seen = database.attempts.subscribe();
            async move { seen.wait_for(|made| *made >= n).await.map(|_| ()).unwrap() }
        };
        let err = database.ping().await.unwrap_err().to_string();
        assert!(err.contains("not connected yet"), "before the first attempt ends: {err}");
        tell.send(false).unwrap();
        attempts(1).await;
        let err = database.ping().await.unwrap_err().to_string();
        assert!(err.contains("connection refused") && err.contains("retrying"), "{err}");
        assert!(database.get("f", b"k").await.is_err(), "no answer is ever a 'not stored'");
        tell.send(false).unwrap();
        tell.send(true).unwrap();
        let waited = database.connected(Duration::from_secs(60)).await;
        assert!(waited.is_ok(), "connected after backing off: {:?}", waited.err());
        assert_eq!(*database.attempts.borrow(), 3, "two refused, then connected");
        database.ping().await.unwrap();
        assert_eq!(database.get("f", b"k").await.unwrap(), None);
    }

    #[tokio::test]
    async fn waiting_for_a_database_that_never_answers_ends_with_why() {
        let database = ConnectingDatabase::spawn_with_backoff("the test database", QUICK, || async {
            Err::<Arc<dyn Database>, _>(DatabaseError::other("no route to host"))
        });
        let mut attempts = database.attempts.subscribe();
        attempts.wait_for(|made| *made >= 1).await.unwrap();
        let err = database.connected(QUICK).await.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err.contains("no route to host"), "the wait ends with why, not in a hang: {err}");
    }
}
