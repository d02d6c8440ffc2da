//! The keys of the quick start in an embedded redb file: the [`Database`] of an origin with no
//! `cassandra_nodes`, one process only.

use crate::store::{Database, DatabaseError, FilterDef, KeySink};
use async_trait::async_trait;
use redb::{Database as RedbFile, ReadableDatabase, ReadableTable, TableDefinition};
use std::path::Path;
use std::sync::Arc;

/// Keys by `filter \0 key`; filter definitions by name (JSON).
const KEYS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("keys");
const FILTERS: TableDefinition<&str, &str> = TableDefinition::new("filters");

fn filter_defs_in(db: &RedbFile) -> Result<Vec<FilterDef>, DatabaseError> {
    let tx = db.begin_read().map_err(DatabaseError::other)?;
    let table = tx.open_table(FILTERS).map_err(DatabaseError::other)?;
    let mut out = Vec::new();
    for entry in table.iter().map_err(DatabaseError::other)? {
        let (_, v) = entry.map_err(DatabaseError::other)?;
        out.push(serde_json::from_str(v.value()).map_err(DatabaseError::other)?);
    }
    Ok(out)
}

/// Keys handed over per chunk by a scan.
const SCAN_CHUNK: usize = 16 * 1024;

/// Reads every key of `filter`, calling `send` per chunk until it returns false.
fn scan_chunks(db: &RedbFile, filter: &str, mut send: impl FnMut(Vec<Vec<u8>>) -> bool) -> Result<(), DatabaseError> {
    let tx = db.begin_read().map_err(DatabaseError::other)?;
    let table = tx.open_table(KEYS).map_err(DatabaseError::other)?;
    let prefix = row_key(filter, b"");
    let mut chunk = Vec::with_capacity(SCAN_CHUNK);
    for entry in table.range(prefix.as_slice()..).map_err(DatabaseError::other)? {
        let (k, _) = entry.map_err(DatabaseError::other)?;
        let Some(key) = k.value().strip_prefix(prefix.as_slice()) else {
            break;
        };
        chunk.push(key.to_vec());
        if chunk.len() == SCAN_CHUNK && !send(std::mem::replace(&mut chunk, Vec::with_capacity(SCAN_CHUNK))) {
            return Ok(());
        }
    }
    if !chunk.is_empty() {
        send(chunk);
    }
    Ok(())
}

/// Keys in an embedded redb file.
pub struct RedbDatabase {
    db: Arc<RedbFile>,
}

fn row_key(filter: &str, key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(filter.len() + 1 + key.len());
    k.extend_from_slice(filter.as_bytes());
    k.push(0);
    k.extend_from_slice(key);
    k
}

impl RedbDatabase {
    /// Opens (or creates) the key file.
    pub fn open(path: &Path) -> Result<RedbDatabase, DatabaseError> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(DatabaseError::other)?;
        }
        let db = RedbFile::create(path)
            .map_err(|e| DatabaseError::other(format!("cannot open key file {}: {e}", path.display())))?;
        let tx = db.begin_write().map_err(DatabaseError::other)?;
        tx.open_table(KEYS).map_err(DatabaseError::other)?;
        tx.open_table(FILTERS).map_err(DatabaseError::other)?;
        tx.commit().map_err(DatabaseError::other)?;
        Ok(RedbDatabase { db: Arc::new(db) })
    }

    /// Every stored key of `filter`, for rebuilding the in-process filter at start-up.
    pub fn keys_of(&self, filter: &str) -> Result<Vec<Vec<u8>>, DatabaseError> {
        let mut out = Vec::new();
        scan_chunks(&self.db, filter, |chunk| {
            out.extend(chunk);
            true
        })?;
        Ok(out)
    }

    /// Every filter definition.
    pub fn filter_defs(&self) -> Result<Vec<FilterDef>, DatabaseError> {
        filter_defs_in(&self.db)
    }

    async fn blocking<T: Send + 'static>(
        &self,
        work: impl FnOnce(&RedbFile) -> Result<T, DatabaseError> + Send + 'static,
    ) -> Result<T, DatabaseError> {
        let db = self.db.clone();
        tokio::task::spawn_blocking(move || work(&db)).await.map_err(DatabaseError::other)?
    }
}

#[async_trait]
impl Database for RedbDatabase {
    async fn scan_keys(&self, filter: &str, _concurrency: usize, sink: KeySink<'_>) -> Result<u64, DatabaseError> {
        // redb is read on a blocking thread and handed over in chunks, so a rebuild never
        // stalls the runtime that answers lookups.
        let (tx, mut rx) = tokio::sync::mpsc::channel::<Vec<Vec<u8>>>(4);
        let (db, filter_name) = (self.db.clone(), filter.to_owned());
        let reader = tokio::task::spawn_blocking(move || {
            scan_chunks(&db, &filter_name, |chunk| tx.blocking_send(chunk).is_ok())
        });
        let mut n = 0u64;
        while let Some(chunk) = rx.recv().await {
            chunk.iter().for_each(|k| sink(k));
            n += chunk.len() as u64;
        }
        reader.await.map_err(DatabaseError::other)??;
        Ok(n)
    }

    async fn filters(&self) -> Result<Vec<FilterDef>, DatabaseError> {
        self.blocking(filter_defs_in).await
    }

    async fn resize_filter(&self, name: &str, capacity: u64, fp_rate: f64) -> Result<(), DatabaseError> {
        let name = name.to_owned();
        self.blocking(move |db| {
            let tx = db.begin_write().map_err(DatabaseError::other)?;
            {
                let mut table = tx.open_table(FILTERS).map_err(DatabaseError::other)?;
                let json = table.get(name.as_str()).map_err(DatabaseError::other)?.map(|v| v.value().to_owned());
                let Some(json) = json else { return Err(DatabaseError::other(format!("no filter named {name:?}"))) };
                let mut def: FilterDef = serde_json::from_str(&json).map_err(DatabaseError::other)?;
                def.capacity = capacity;
                def.fp_rate = fp_rate;
                let json = serde_json::to_string(&def).map_err(DatabaseError::other)?;
                table.insert(name.as_str(), json.as_str()).map_err(DatabaseError::other)?;
            }
            tx.commit().map_err(DatabaseError::other)
        })
        .await
    }

    async fn get(&self, filter: &str, key: &[u8]) -> Result<Option<Vec<u8>>, DatabaseError> {
        let k = row_key(filter, key);
        self.blocking(move |db| {
            let tx = db.begin_read().map_err(DatabaseError::other)?;
            let table = tx.open_table(KEYS).map_err(DatabaseError::other)?;
            Ok(table.get(k.as_slice()).map_err(DatabaseError::other)?.map(|v| v.value().to_vec()))
        })
        .await
    }

    async fn put(&self, filter: &str, key: &[u8], value: &[u8]) -> Result<(), DatabaseError> {
        let (k, v) = (row_key(filter, key), value.to_vec());
        self.blocking(move |db| {
            let tx = db.begin_write().map_err(DatabaseError::other)?;
            tx.open_table(KEYS)
                .map_err(DatabaseError::other)?
                .insert(k.as_slice(), v.as_slice())
                .map_err(DatabaseError::other)?;
            tx.commit().map_err(DatabaseError::other)
        })
        .await
    }

    async fn delete(&self, filter: &str, key: &[u8]) -> Result<bool, DatabaseError> {
        let k = row_key(filter, key);
        self.blocking(move |db| {
            let tx = db.begin_write().map_err(DatabaseError::other)?;
            let existed = tx
                .open_table(KEYS)
                .map_err(DatabaseError::other)?
                .remove(k.as_slice())
                .map_err(DatabaseError::other)?
                .is_some();
            tx.commit().map_err(DatabaseError::other)?;
            Ok(existed)
        })
        .await
    }

    async fn create_filter(&self, def: &FilterDef) -> Result<(FilterDef, bool), DatabaseError> {
        let def = def.clone();
        self.blocking(move |db| {
            let tx = db.begin_write().map_err(DatabaseError::other)?;
            let stored = {
                let mut table = tx.open_table(FILTERS).map_err(DatabaseError::other)?;
                let existing =
                    table.get(def.name.as_str()).map_err(DatabaseError::other)?.map(|v| v.value().to_owned());
                match existing {
                    Some(json) => (serde_json::from_str(&json).map_err(DatabaseError::other)?, false),
                    None => {
                        let json = serde_json::to_string(&def).map_err(DatabaseError::other)?;
                        table.insert(def.name.as_str(), json.as_str()).map_err(DatabaseError::other)?;
                        (def, true)
                    }
                }
            };
            tx.commit().map_err(DatabaseError::other)?;
            Ok(stored)
        })
        .await
    }

    async fn filter(&self, name: &str) -> Result<Option<FilterDef>, DatabaseError> {
        let name = name.to_owned();
        self.blocking(move |db| {
            let tx = db.begin_read().map_err(DatabaseError::other)?;
            let table = tx.open_table(FILTERS).map_err(DatabaseError::other)?;
            let json = table.get(name.as_str()).map_err(DatabaseError::other)?.map(|v| v.value().to_owned());
            json.map(|j| serde_json::from_str(&j).map_err(DatabaseError::other)).transpose()
        })
        .await
    }

    async fn drop_filter(&self, name: &str) -> Result<bool, DatabaseError> {
        let name = name.to_owned();
        self.blocking(move |db| {
            let tx = db.begin_write().map_err(DatabaseError::other)?;
            let existed = tx
                .open_table(FILTERS)
                .map_err(DatabaseError::other)?
                .remove(name.as_str())
                .map_err(DatabaseError::other)?
                .is_some();
            tx.commit().map_err(DatabaseError::other)?;
            Ok(existed)
        })
        .await
    }

    async fn has_keys(&self, filter: &str) -> Result<bool, DatabaseError> {
        let prefix = row_key(filter, b"");
        self.blocking(move |db| {
            let tx = db.begin_read().map_err(DatabaseError::other)?;
            let table = tx.open_table(KEYS).map_err(DatabaseError::other)?;
            let first = table
                .range(prefix.as_slice()..)
                .map_err(DatabaseError::other)?
                .next()
                .transpose()
                .map_err(DatabaseError::other)?;
            Ok(first.is_some_and(|(k, _)| k.value().starts_with(&prefix)))
        })
        .await
    }

    async fn delete_keys(&self, filter: &str, _concurrency: usize) -> Result<u64, DatabaseError> {
        let prefix = row_key(filter, b"");
        self.blocking(move |db| {
            let tx = db.begin_write().map_err(DatabaseError::other)?;
            let deleted = {
                let mut table = tx.open_table(KEYS).map_err(DatabaseError::other)?;
                // The keys of `filter` are the rows from `filter \0` up to (not including)
                // `filter \1`: names never hold a NUL, so no other filter's rows are between.
                let mut end = prefix.clone();
                if let Some(last) = end.last_mut() {
                    *last = 1;
                }
                let mut gone = 0u64;
                table
                    .retain_in(prefix.as_slice()..end.as_slice(), |_, _| {
                        gone += 1;
                        false
                    })
                    .map_err(DatabaseError::other)?;
                gone
            };
            tx.commit().map_err(DatabaseError::other)?;
            Ok(deleted)
        })
        .await
    }

    async fn ping(&self) -> Result<(), DatabaseError> {
        async { Ok(()) }.await
    }
}
