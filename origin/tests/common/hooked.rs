//! The embedded key file with switches a test turns: every call failing (the database down),
//! or `get`s and `put`s held until released (a request stopped part-way, for as long as a test
//! needs).

use async_trait::async_trait;
use bloomgate_origin::store::embedded::RedbDatabase;
use bloomgate_origin::store::{Database, DatabaseError, Dropped, FilterDef, KeySink};
use std::sync::atomic::{AtomicBool, Ordering};
use tokio::sync::Notify;

/// The key file behind switches.
pub struct Hooked {
    inner: RedbDatabase,
    /// Every call fails.
    pub down: AtomicBool,
    /// `get`s wait, after telling `waiting`, until `release` lets one go.
    pub hold_gets: AtomicBool,
    /// `put`s wait the same way.
    pub hold_puts: AtomicBool,
    /// Told when a call starts waiting.
    pub waiting: Notify,
    /// Lets one waiting call go.
    pub release: Notify,
}

impl Hooked {
    /// Over a key file in `dir`, every switch off.
    pub fn open(dir: &std::path::Path) -> Hooked {
        Hooked {
            inner: RedbDatabase::open(&dir.join("keys.redb")).unwrap(),
            down: AtomicBool::new(false),
            hold_gets: AtomicBool::new(false),
            hold_puts: AtomicBool::new(false),
            waiting: Notify::new(),
            release: Notify::new(),
        }
    }

    fn up(&self) -> Result<(), DatabaseError> {
        match self.down.load(Ordering::SeqCst) {
            true => Err(DatabaseError::Error("the test took the database down".into())),
            false => Ok(()),
        }
    }

    async fn wait_if(&self, held: &AtomicBool) {
        if held.load(Ordering::SeqCst) {
            self.waiting.notify_one();
            self.release.notified().await;
        }
    }
}

#[async_trait]
impl Database for Hooked {
    async fn get(&self, filter: &str, key: &[u8]) -> Result<Option<Vec<u8>>, DatabaseError> {
        self.wait_if(&self.hold_gets).await;
        self.up()?;
        self.inner.get(filter, key).await
    }
    async fn put(&self, filter: &str, key: &[u8], value: &[u8]) -> Result<(), DatabaseError> {
        self.wait_if(&self.hold_puts).await;
        self.up()?;
        self.inner.put(filter, key, value).await
    }
    async fn delete(&self, filter: &str, key: &[u8]) -> Result<bool, DatabaseError> {
        self.up()?;
        self.inner.delete(filter, key).await
    }
    async fn scan_keys(&self, filter: &str, concurrency: usize, sink: KeySink<'_>) -> Result<u64, DatabaseError> {
        self.up()?;
        self.inner.scan_keys(filter, concurrency, sink).await
    }
    async fn filters(&self) -> Result<Vec<FilterDef>, DatabaseError> {
        self.up()?;
        self.inner.filters().await
    }
    async fn resize_filter(&self, name: &str, capacity: u64, fp_rate: f64) -> Result<(), DatabaseError> {
        self.up()?;
        self.inner.resize_filter(name, capacity, fp_rate).await
    }
    async fn create_filter(&self, def: &FilterDef) -> Result<(FilterDef, bool), DatabaseError> {
        self.up()?;
        self.inner.create_filter(def).await
    }
    async fn filter(&self, name: &str) -> Result<Option<FilterDef>, DatabaseError> {
        self.up()?;
        self.inner.filter(name).await
    }
    async fn drop_filter(&self, name: &str, dropped: Dropped) -> Result<bool, DatabaseError> {
        self.up()?;
        self.inner.drop_filter(name, dropped).await
    }
    async fn dropped(&self, name: &str) -> Result<Option<Dropped>, DatabaseError> {
        self.up()?;
        self.inner.dropped(name).await
    }
    async fn has_keys(&self, filter: &str) -> Result<bool, DatabaseError> {
        self.up()?;
        self.inner.has_keys(filter).await
    }
    async fn delete_keys(&self, filter: &str, concurrency: usize) -> Result<u64, DatabaseError> {
        self.up()?;
        self.inner.delete_keys(filter, concurrency).await
    }
    async fn ping(&self) -> Result<(), DatabaseError> {
        self.up()?;
        self.inner.ping().await
    }
}
