//! The keys of the quick start in an embedded redb file: the [`Database`] of an origin with no
//! `cassandra_nodes`, one process only.

use crate::store::drop_record::StoredDrop;
use crate::store::{Database, DatabaseError, Dropped, FilterDef, KeySink};
use async_trait::async_trait;
use redb::{Database as RedbFile, ReadableDatabase, ReadableTable, Table, TableDefinition, WriteTransaction};
use std::path::Path;
use std::sync::Arc;

/// What the file's own calls return: redb's and serde_json's errors alike, each turned into a
/// [`DatabaseError`] (by its message, as it was) once, where a call leaves this file.
type FileResult<T> = anyhow::Result<T>;

/// Keys by `filter \0 key`; filter definitions and drop records by name (JSON).
const KEYS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("keys");
const FILTERS: TableDefinition<&str, &str> = TableDefinition::new("filters");
const DROPPED: TableDefinition<&str, &str> = TableDefinition::new("dropped_filters");

fn filter_defs_in(db: &RedbFile) -> FileResult<Vec<FilterDef>> {
    let tx = db.begin_read()?;
    let table = tx.open_table(FILTERS)?;
    let mut out = Vec::new();
    for entry in table.iter()? {
        let (_, v) = entry?;
        out.push(serde_json::from_str(v.value())?);
    }
    Ok(out)
}

/// The definition of filter `name` in the filters table, if there is one.
fn def_in(table: &impl ReadableTable<&'static str, &'static str>, name: &str) -> FileResult<Option<FilterDef>> {
    let json = table.get(name)?.map(|v| v.value().to_owned());
    Ok(json.map(|j| serde_json::from_str(&j)).transpose()?)
}

/// Writes `def` as filter `def.name`'s definition.
fn put_def(table: &mut Table<&'static str, &'static str>, def: &FilterDef) -> FileResult<()> {
    table.insert(def.name.as_str(), serde_json::to_string(def)?.as_str())?;
    Ok(())
}

/// Runs `work` in one write transaction, committed if `work` succeeds.
fn write<T>(db: &RedbFile, work: impl FnOnce(&WriteTransaction) -> FileResult<T>) -> FileResult<T> {
    let tx = db.begin_write()?;
    let done = work(&tx)?;
    tx.commit()?;
    Ok(done)
}

/// Keys handed over per chunk by a scan.
const SCAN_CHUNK: usize = 16 * 1024;

/// Reads every key of `filter`, calling `send` per chunk until it returns false.
fn scan_chunks(db: &RedbFile, filter: &str, mut send: impl FnMut(Vec<Vec<u8>>) -> bool) -> FileResult<()> {
    let tx = db.begin_read()?;
    let table = tx.open_table(KEYS)?;
    let prefix = row_key(filter, b"");
    let mut chunk = Vec::with_capacity(SCAN_CHUNK);
    for entry in table.range(prefix.as_slice()..)? {
        let (k, _) = entry?;
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
        write(&db, |tx| {
            tx.open_table(KEYS)?;
            tx.open_table(FILTERS)?;
            tx.open_table(DROPPED)?;
            Ok(())
        })
        .map_err(DatabaseError::other)?;
        Ok(RedbDatabase { db: Arc::new(db) })
    }

    /// Every stored key of `filter`, for rebuilding the in-process filter at start-up.
    pub fn keys_of(&self, filter: &str) -> Result<Vec<Vec<u8>>, DatabaseError> {
        let mut out = Vec::new();
        scan_chunks(&self.db, filter, |chunk| {
            out.extend(chunk);
            true
        })
        .map_err(DatabaseError::other)?;
        Ok(out)
    }

    /// Every filter definition.
    pub fn filter_defs(&self) -> Result<Vec<FilterDef>, DatabaseError> {
        filter_defs_in(&self.db).map_err(DatabaseError::other)
    }

    async fn blocking<T: Send + 'static>(
        &self,
        work: impl FnOnce(&RedbFile) -> FileResult<T> + Send + 'static,
    ) -> Result<T, DatabaseError> {
        let db = self.db.clone();
        tokio::task::spawn_blocking(move || work(&db))
            .await
            .map_err(DatabaseError::other)?
            .map_err(DatabaseError::other)
    }
}

#[async_trait]
impl Database for RedbDatabase {
    async fn scan_keys(&self, filter: &str, _concurrency: usize, sink: KeySink<'_>) -> Result<u64, DatabaseError> {
        // redb is read on a blocking thread and handed over in chunks, so a rebuild never
        // stalls the runtime that answers lookups.
        let (tx, mut rx) = tokio::sync::mpsc::channel::<Vec<Vec<u8>>>(4);
        let filter_name = filter.to_owned();
        let reading = self.blocking(move |db| scan_chunks(db, &filter_name, |chunk| tx.blocking_send(chunk).is_ok()));
        let handing_over = async {
            let mut n = 0u64;
            while let Some(chunk) = rx.recv().await {
                chunk.iter().for_each(|k| sink(k));
                n += chunk.len() as u64;
            }
            n
        };
        let (read, n) = tokio::join!(reading, handing_over);
        read.map(|()| n)
    }

    async fn filters(&self) -> Result<Vec<FilterDef>, DatabaseError> {
        self.blocking(filter_defs_in).await
    }

    async fn resize_filter(&self, name: &str, capacity: u64, fp_rate: f64) -> Result<(), DatabaseError> {
        let name = name.to_owned();
        self.blocking(move |db| {
            write(db, |tx| {
                let mut table = tx.open_table(FILTERS)?;
                let Some(def) = def_in(&table, &name)? else { anyhow::bail!("no filter named {name:?}") };
                put_def(&mut table, &FilterDef { capacity, fp_rate, ..def })
            })
        })
        .await
    }

    async fn get(&self, filter: &str, key: &[u8]) -> Result<Option<Vec<u8>>, DatabaseError> {
        let k = row_key(filter, key);
        self.blocking(move |db| {
            let tx = db.begin_read()?;
            let table = tx.open_table(KEYS)?;
            Ok(table.get(k.as_slice())?.map(|v| v.value().to_vec()))
        })
        .await
    }

    async fn put(&self, filter: &str, key: &[u8], value: &[u8]) -> Result<(), DatabaseError> {
        let (k, v) = (row_key(filter, key), value.to_vec());
        self.blocking(move |db| {
            write(db, |tx| {
                tx.open_table(KEYS)?.insert(k.as_slice(), v.as_slice())?;
                Ok(())
            })
        })
        .await
    }

    async fn delete(&self, filter: &str, key: &[u8]) -> Result<bool, DatabaseError> {
        let k = row_key(filter, key);
        self.blocking(move |db| write(db, |tx| Ok(tx.open_table(KEYS)?.remove(k.as_slice())?.is_some()))).await
    }

    async fn create_filter(&self, def: &FilterDef) -> Result<(FilterDef, bool), DatabaseError> {
        let def = def.clone();
        self.blocking(move |db| {
            write(db, |tx| {
                let mut table = tx.open_table(FILTERS)?;
                if let Some(existing) = def_in(&table, &def.name)? {
                    return Ok((existing, false));
                }
                put_def(&mut table, &def)?;
                Ok((def, true))
            })
        })
        .await
    }

    async fn filter(&self, name: &str) -> Result<Option<FilterDef>, DatabaseError> {
        let name = name.to_owned();
        self.blocking(move |db| def_in(&db.begin_read()?.open_table(FILTERS)?, &name)).await
    }

    async fn drop_filter(&self, name: &str, dropped: Dropped) -> Result<bool, DatabaseError> {
        let (name, record) =
            (name.to_owned(), serde_json::to_string(&StoredDrop::of(dropped)?).map_err(DatabaseError::other)?);
        self.blocking(move |db| {
            write(db, |tx| {
                tx.open_table(DROPPED)?.insert(name.as_str(), record.as_str())?;
                Ok(tx.open_table(FILTERS)?.remove(name.as_str())?.is_some())
            })
        })
        .await
    }

    async fn dropped(&self, name: &str) -> Result<Option<Dropped>, DatabaseError> {
        let owned = name.to_owned();
        let stored = self
            .blocking(move |db| {
                let table = db.begin_read()?.open_table(DROPPED)?;
                let json = table.get(owned.as_str())?.map(|v| v.value().to_owned());
                Ok(json.map(|j| serde_json::from_str::<StoredDrop>(&j)).transpose()?)
            })
            .await?;
        stored.map(|record| record.read(name)).transpose()
    }

    async fn has_keys(&self, filter: &str) -> Result<bool, DatabaseError> {
        let prefix = row_key(filter, b"");
        self.blocking(move |db| {
            let tx = db.begin_read()?;
            let table = tx.open_table(KEYS)?;
            let first = table.range(prefix.as_slice()..)?.next().transpose()?;
            Ok(first.is_some_and(|(k, _)| k.value().starts_with(&prefix)))
        })
        .await
    }

    async fn delete_keys(&self, filter: &str, _concurrency: usize) -> Result<u64, DatabaseError> {
        let prefix = row_key(filter, b"");
        self.blocking(move |db| {
            write(db, |tx| {
                // The keys of `filter` are the rows from `filter \0` up to (not including)
                // `filter \1`: names never hold a NUL, so no other filter's rows are between.
                let mut end = prefix.clone();
                if let Some(last) = end.last_mut() {
                    *last = 1;
                }
                let mut gone = 0u64;
                tx.open_table(KEYS)?.retain_in(prefix.as_slice()..end.as_slice(), |_, _| {
                    gone += 1;
                    false
                })?;
                Ok(gone)
            })
        })
        .await
    }

    async fn ping(&self) -> Result<(), DatabaseError> {
        async { Ok(()) }.await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bloomgate_filter::KeyFormat;

    /// A key file in a directory of its own, removed afterwards.
    struct File {
        dir: std::path::PathBuf,
        db: RedbDatabase,
    }

    impl File {
        fn new() -> File {
            let dir = std::env::temp_dir().join(format!("bloomgate-key-file-{:016x}", rand::random::<u64>()));
            let db = RedbDatabase::open(&dir.join("keys.redb")).unwrap();
            File { dir, db }
        }
    }

    impl Drop for File {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }

    fn def(name: &str, capacity: u64) -> FilterDef {
        FilterDef { name: name.into(), key_format: KeyFormat::Bytes, capacity, fp_rate: 0.01, segment_bytes: 4096 }
    }

    #[tokio::test]
    async fn a_definition_is_created_once_resized_in_place_and_dropped() {
        let f = File::new();
        assert_eq!(f.db.create_filter(&def("a", 10)).await.unwrap(), (def("a", 10), true));
        // A second create finds the first, whatever it asks for.
        assert_eq!(f.db.create_filter(&def("a", 99)).await.unwrap(), (def("a", 10), false));
        f.db.resize_filter("a", 20, 0.001).await.unwrap();
        let resized = FilterDef { fp_rate: 0.001, ..def("a", 20) };
        assert_eq!(f.db.filter("a").await.unwrap(), Some(resized.clone()));
        assert_eq!(f.db.filters().await.unwrap(), vec![resized]);
        let missing = f.db.resize_filter("b", 20, 0.001).await.unwrap_err();
        assert!(missing.to_string().contains("no filter named \"b\""), "{missing}");
        let dropped = Dropped { last_generation: 1_765_000_000_000, key_format: KeyFormat::Bytes };
        assert_eq!(f.db.dropped("a").await.unwrap(), None);
        assert!(f.db.drop_filter("a", dropped).await.unwrap());
        assert!(!f.db.drop_filter("a", dropped).await.unwrap());
        assert_eq!(f.db.filter("a").await.unwrap(), None);
        assert_eq!(f.db.dropped("a").await.unwrap(), Some(dropped), "the drop record stays");
        assert_eq!(f.db.dropped("b").await.unwrap(), None);
    }

    #[tokio::test]
    async fn a_drop_record_outlives_the_process_and_a_newer_one_is_refused() {
        let f = File::new();
        let dropped = Dropped { last_generation: 42, key_format: KeyFormat::SHA256_HEX };
        f.db.drop_filter("a", dropped).await.unwrap();
        let dir = f.dir.join("kept");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::copy(f.dir.join("keys.redb"), dir.join("keys.redb")).unwrap();
        let reopened = File { db: RedbDatabase::open(&dir.join("keys.redb")).unwrap(), dir };
        assert_eq!(reopened.db.dropped("a").await.unwrap(), Some(dropped));
        write(&reopened.db.db, |tx| {
            let newer = r#"{"format":2,"key_format":"hex:64","last_generation":43}"#;
            tx.open_table(DROPPED)?.insert("b", newer)?;
            Ok(())
        })
        .unwrap();
        let refused = reopened.db.dropped("b").await.unwrap_err();
        assert!(matches!(refused, DatabaseError::UnknownFormat { record: "drop record", found: 2, .. }), "{refused}");
    }

    #[tokio::test]
    async fn keys_stay_in_their_filter() {
        let f = File::new();
        // "ab" is a prefix of "abc": a filter's rows must end at its name, not run into the next.
        for (filter, key) in [("ab", b"k1"), ("ab", b"k2"), ("abc", b"k1")] {
            f.db.put(filter, key, b"v").await.unwrap();
        }
        assert_eq!(f.db.get("ab", b"k1").await.unwrap(), Some(b"v".to_vec()));
        assert_eq!(f.db.get("ab", b"k3").await.unwrap(), None);
        assert_eq!(f.db.keys_of("ab").unwrap(), vec![b"k1".to_vec(), b"k2".to_vec()]);
        assert!(f.db.delete("ab", b"k1").await.unwrap());
        assert!(!f.db.delete("ab", b"k1").await.unwrap());
        assert_eq!(f.db.delete_keys("ab", 1).await.unwrap(), 1);
        assert!(!f.db.has_keys("ab").await.unwrap());
        assert!(f.db.has_keys("abc").await.unwrap());
        let seen = std::sync::Mutex::new(Vec::new());
        let sink = |k: &[u8]| seen.lock().unwrap().push(k.to_vec());
        assert_eq!(f.db.scan_keys("abc", 1, &sink).await.unwrap(), 1);
        assert_eq!(seen.into_inner().unwrap(), vec![b"k1".to_vec()]);
    }
}
