//! The gate: lookups (filter first, database on "maybe" or when the filter is unavailable),
//! writes (filter first, then database), and the edge's manifest and segments.
//!
//! The two rules that make it safe live in [`after_filter`] and [`Gate::insert_many`]:
//! a filter that cannot answer is never read as "not seen", and no key is acknowledged unless
//! the filter already holds its bits.

use crate::def_cache::DefCache;
use crate::error::AppError;
use crate::local_copy::LocalCopies;
use crate::metrics::{Fallthrough, Metrics, Store};
use crate::store::{Database, FilterDef, FilterMeta, FilterState, FilterStore, FilterUnavailable, JournalRead, Roles};
use bloomgate_client::api::FilterStats;
use bloomgate_filter::{
    encode_journal, encode_segment, encode_segment_at, hash_key, validate_filter_name, JournalPosition, KeyHash,
    Manifest,
};
use futures::StreamExt;
use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

/// Lookups of one batch in flight at once against the stores.
const BATCH_CONCURRENCY: usize = 64;

/// A chunk of a generation's insert journal as the edge receives it.
///
/// When the chunk ends at the head and its generation is the filter's readable one, it says
/// all a manifest would (the generation's params and key format do not change): the edge takes
/// it as its next manifest, one request per refresh instead of a manifest and a chunk.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JournalChunk {
    /// The chunk, encoded (`bloomgate_filter::journal`).
    pub wire: Vec<u8>,
    /// Entries the journal had when read: the chunk ends at the head exactly when its `to` is
    /// this.
    pub head: u64,
    /// The generation a manifest would have named, read after the request arrived and before
    /// the entries; None when no generation is readable.
    pub readable_generation: Option<u64>,
}

/// Who gave the answer (the API's type).
pub use bloomgate_client::api::AnsweredBy;

/// A lookup's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answer {
    /// Whether the key is stored.
    pub seen: bool,
    /// Who answered.
    pub answered_by: AnsweredBy,
    /// The stored value, when seen.
    pub value: Option<Vec<u8>>,
}

/// What to do after asking the filter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AfterFilter {
    /// The filter said no: answer "not seen" without the database.
    AnswerNotSeen,
    /// The filter said maybe: ask the database (a "no" there is a false positive).
    AskDatabaseAfterMaybe,
    /// The filter could not answer: ask the database, as if there were no filter.
    AskDatabaseFilterUnavailable(Fallthrough),
    /// The filter was dropped: answer "no such filter", never "not seen".
    NoSuchFilter,
}

/// The decision at the heart of the gate. Only a definite `Ok(false)` answers "not seen";
/// every failure is a fall-through, never a "no"; a dropped filter is no filter at all.
pub fn after_filter(answer: &Result<bool, FilterUnavailable>) -> AfterFilter {
    match answer {
        Ok(false) => AfterFilter::AnswerNotSeen,
        Ok(true) => AfterFilter::AskDatabaseAfterMaybe,
        Err(FilterUnavailable::Dropped) => AfterFilter::NoSuchFilter,
        Err(e) => AfterFilter::AskDatabaseFilterUnavailable(fallthrough(e)),
    }
}

/// The reason a lookup falls through, as metrics label it.
fn fallthrough(e: &FilterUnavailable) -> Fallthrough {
    match e {
        FilterUnavailable::Timeout => Fallthrough::Timeout,
        FilterUnavailable::Error(_) => Fallthrough::Error,
        FilterUnavailable::MetaMissing => Fallthrough::MetaMissing,
        FilterUnavailable::SegmentMissing(_) => Fallthrough::SegmentMissing,
        FilterUnavailable::Incarnation => Fallthrough::IncarnationChanged,
        // Never a fall-through (see `after_filter`); counted as what it looks like to the
        // bits: no metadata.
        FilterUnavailable::Dropped => Fallthrough::MetaMissing,
    }
}

/// The gate's state: both stores, caches of definitions and metadata, and metrics.
pub struct Gate {
    /// The filter store, by the role each path plays (see `store::roles`).
    store: Roles,
    keys: Arc<dyn Database>,
    /// Metrics, shared with the HTTP layer.
    pub metrics: Arc<Metrics>,
    /// What the status page plots, sampled by the recovery check.
    pub status: crate::status_history::StatusHistory,
    /// Wakes the recovery check early: a request found the filter's bits lost.
    pub recovery_nudge: tokio::sync::Notify,
    defs: DefCache,
    /// The filters' bits held in process (None: every lookup asks the filter store).
    copies: Option<LocalCopies>,
    metas: RwLock<HashMap<String, (FilterMeta, Instant)>>,
    cache_ttl: Duration,
    filter_enabled: bool,
    max_batch: usize,
    max_filter_bytes: u64,
    journal_enabled: bool,
}

/// Settings of the gate.
#[derive(Clone, Copy, Debug)]
pub struct GateSettings {
    /// How long metadata and unknown-filter answers are cached.
    pub cache_ttl: Duration,
    /// Consult the filter (false = baseline: every lookup reads the database).
    pub filter_enabled: bool,
    /// Keys per batch.
    pub max_batch: usize,
    /// Largest filter (bytes of bits) a create, rebuild or resize may ask for.
    pub max_filter_bytes: u64,
    /// Name new generations with an insert journal (edges catch up from it). Adds append to
    /// a generation that has one whatever this says (see `FilterMeta::journal`).
    pub journal_enabled: bool,
    /// Bytes of bits held in local copies (0: none; see `local_copy`).
    pub local_copy_max_bytes: u64,
}

/// Definition of a filter to create, as sent by a writer (the API's type).
pub use bloomgate_client::api::CreateFilter;

mod filters;
pub use filters::Created;

impl Gate {
    /// A gate over these stores.
    pub fn new(filters: Arc<dyn FilterStore>, keys: Arc<dyn Database>, settings: GateSettings) -> Gate {
        let metrics = Arc::new(Metrics::default());
        let store = Roles::of(filters);
        let copies = (settings.local_copy_max_bytes > 0)
            .then(|| LocalCopies::new(store.copies.clone(), settings.local_copy_max_bytes, metrics.clone()));
        Gate {
            store,
            keys,
            copies,
            metrics,
            status: crate::status_history::StatusHistory::default(),
            recovery_nudge: tokio::sync::Notify::new(),
            defs: DefCache::new(settings.cache_ttl),
            metas: RwLock::default(),
            cache_ttl: settings.cache_ttl,
            filter_enabled: settings.filter_enabled,
            max_batch: settings.max_batch,
            max_filter_bytes: settings.max_filter_bytes,
            journal_enabled: settings.journal_enabled,
        }
    }

    /// The database, for health checks.
    pub fn database(&self) -> &Arc<dyn Database> {
        &self.keys
    }

    /// Bytes of filter bits held in local copies now.
    pub fn local_copy_bytes(&self) -> u64 {
        self.copies.as_ref().map_or(0, LocalCopies::held_bytes)
    }

    /// The filter store, whole: for rebuilds and health checks.
    pub fn filter_store(&self) -> &Arc<dyn FilterStore> {
        &self.store.whole
    }

    /// The filter store by role (the recovery check reads through `stats`).
    pub fn roles(&self) -> &Roles {
        &self.store
    }

    /// A filter's definition; unknown filters are a 404 (see [`DefCache`] for what a stream
    /// of made-up names costs).
    pub async fn def(&self, name: &str) -> Result<Arc<FilterDef>, AppError> {
        validate_filter_name(name)?;
        self.defs.get(self.keys.as_ref(), name).await?.ok_or_else(|| AppError::UnknownFilter(name.into()))
    }

    /// The largest filter a create, rebuild or resize may ask for, in bytes of bits.
    pub fn max_filter_bytes(&self) -> u64 {
        self.max_filter_bytes
    }

    /// The generation lookups read, cached for `cache_ttl`.
    ///
    /// A cached copy never makes a "no" wrong, however old: every generation a state names
    /// takes every add until it is retired, and a retired generation's bits are gone before
    /// the state stops naming it, so reading it falls through (see `store::state`). The cache
    /// is dropped whenever the filter could not answer, so the next lookup reads the state.
    async fn meta(&self, name: &str) -> Result<FilterMeta, FilterUnavailable> {
        let cached = self.metas.read().unwrap_or_else(|e| e.into_inner()).get(name).copied();
        if let Some((meta, at)) = cached {
            if at.elapsed() < self.cache_ttl {
                return Ok(meta);
            }
        }
        let asked = Instant::now();
        let meta = self.store.lookup.state(name).await.and_then(|s| match s.readable() {
            Some(meta) => Ok(meta),
            None if s.dropped.is_some() => Err(FilterUnavailable::Dropped),
            None if s.active_is_stale() => Err(FilterUnavailable::Incarnation),
            None => Err(FilterUnavailable::MetaMissing),
        });
        let mut metas = self.metas.write().unwrap_or_else(|e| e.into_inner());
        match &meta {
            Ok(m) => metas.insert(name.into(), (*m, asked)),
            Err(_) => metas.remove(name),
        };
        meta
    }

    fn forget_meta(&self, name: &str) {
        self.metas.write().unwrap_or_else(|e| e.into_inner()).remove(name);
    }

    async fn ask_filter(&self, name: &str, key: &[u8]) -> (Result<bool, FilterUnavailable>, Store) {
        let meta = match self.meta(name).await {
            Ok(meta) => meta,
            Err(e) => return (Err(e), Store::Redis),
        };
        let hash = hash_key(key, meta.params.seed);
        // The local copy answers only behind its read barrier (see `local_copy`); when it
        // cannot, the store is asked as if there were none.
        let held = match &self.copies {
            Some(copies) if meta.journal => copies.may_contain(name, meta, &hash).await,
            _ => None,
        };
        let (answer, asked) = match held {
            Some(answer) => (answer, Store::LocalCopy),
            None => (self.store.lookup.may_contain(name, meta, hash).await, Store::Redis),
        };
        if answer.is_err() {
            self.forget_meta(name);
        }
        (answer, asked)
    }

    /// Looks up one key.
    pub async fn lookup(&self, name: &str, raw_key: &[u8]) -> Result<Answer, AppError> {
        let started = Instant::now();
        let def = self.def(name).await?;
        let key = def.key_format.normalize(raw_key)?;
        let answer = self.lookup_normalized(name, &key).await;
        self.metrics.observe_lookup(started.elapsed());
        answer
    }

    async fn lookup_normalized(&self, name: &str, key: &[u8]) -> Result<Answer, AppError> {
        let counters = self.metrics.filter(name);
        let step = if self.filter_enabled {
            let asked_at = Instant::now();
            let (answer, asked) = self.ask_filter(name, key).await;
            self.metrics.observe_store(asked, asked_at.elapsed());
            after_filter(&answer)
        } else {
            AfterFilter::AskDatabaseFilterUnavailable(Fallthrough::Disabled)
        };
        match step {
            AfterFilter::AnswerNotSeen => {
                counters.filter_negatives.inc();
                self.metrics.answered(AnsweredBy::Filter);
                return Ok(Answer { seen: false, answered_by: AnsweredBy::Filter, value: None });
            }
            AfterFilter::AskDatabaseAfterMaybe => {
                counters.filter_maybes.inc();
            }
            AfterFilter::AskDatabaseFilterUnavailable(reason) => {
                self.metrics.fallthrough(reason);
                if reason.needs_recovery() {
                    self.recovery_nudge.notify_one();
                }
            }
            AfterFilter::NoSuchFilter => return Err(AppError::UnknownFilter(name.into())),
        }
        self.metrics.database_reads.inc();
        let asked = Instant::now();
        let stored = self.keys.get(name, key).await;
        self.metrics.observe_store(Store::Database, asked.elapsed());
        let stored = stored.inspect_err(|_| {
            self.metrics.database_errors.inc();
        })?;
        self.metrics.answered(AnsweredBy::Database);
        if stored.is_none() && step == AfterFilter::AskDatabaseAfterMaybe {
            counters.false_positives.inc();
        }
        Ok(Answer { seen: stored.is_some(), answered_by: AnsweredBy::Database, value: stored })
    }

    /// Normalises a batch, refusing all of it if any key is bad (the error names the index).
    fn normalize_batch(&self, def: &FilterDef, raw: &[String]) -> Result<Vec<Vec<u8>>, AppError> {
        if raw.len() > self.max_batch {
            return Err(AppError::BatchTooLarge { max: self.max_batch });
        }
        raw.iter()
            .enumerate()
            .map(|(i, k)| {
                def.key_format.normalize(k.as_bytes()).map_err(|e| AppError::BadRequest(format!("keys[{i}]: {e}")))
            })
            .collect()
    }

    /// Looks up a batch; answers in request order.
    pub async fn lookup_many(&self, name: &str, raw: &[String]) -> Result<Vec<Answer>, AppError> {
        let def = self.def(name).await?;
        let keys = self.normalize_batch(&def, raw)?;
        // Futures collected first: a lazy `map` closure in the stream type trips the compiler's
        // higher-ranked `Send` check in handlers.
        // Each key is counted as a single lookup is (who answered, store latency); the batch is
        // timed as a whole.
        let started = Instant::now();
        let lookups: Vec<_> = keys.iter().map(|k| self.lookup_normalized(name, k)).collect();
        let answers =
            futures::stream::iter(lookups).buffered(BATCH_CONCURRENCY).collect::<Vec<_>>().await.into_iter().collect();
        self.metrics.observe_batch(started.elapsed());
        answers
    }

    /// Stores one key: filter first, then the database.
    pub async fn insert(&self, name: &str, raw_key: &[u8], value: &[u8]) -> Result<(), AppError> {
        let def = self.def(name).await?;
        let key = def.key_format.normalize(raw_key)?;
        self.insert_many(name, vec![(key, value.to_vec())]).await
    }

    /// Stores a batch of raw keys with empty values, all or (on bad input) none.
    pub async fn insert_batch(&self, name: &str, raw: &[String]) -> Result<usize, AppError> {
        let def = self.def(name).await?;
        let keys = self.normalize_batch(&def, raw)?;
        let n = keys.len();
        self.insert_many(name, keys.into_iter().map(|k| (k, Vec::new())).collect()).await?;
        Ok(n)
    }

    /// The write path. The filter add must succeed before anything reaches the database: a
    /// key in the database but not in the filter would be answered "not seen". If the key
    /// store then fails, the filter holds a key the store lacks: a harmless false positive, and
    /// the caller's retry completes the write.
    ///
    /// The state is read twice, both times fresh: before the adds, and again after the key
    /// store has the keys. A generation the second read names that the first did not (a
    /// rebuild started meanwhile) gets the keys too before the write is acknowledged. So for
    /// any generation G a rebuild names at time t, an acknowledged write either added to G, or
    /// read the state the second time before t — and then its keys were in the database
    /// before t, where G's scan (which starts after t) reads them. No settle wait, no
    /// assumption about how long writes take.
    ///
    /// Both reads must also find the filter live and of one lineage: a write that found it
    /// dropped, or dropped and created again, between them is not acknowledged (its key may
    /// have been deleted with the dropped filter; see `gate::filters`).
    async fn insert_many(&self, name: &str, entries: Vec<(Vec<u8>, Vec<u8>)>) -> Result<(), AppError> {
        let fail = |e: FilterUnavailable| {
            self.metrics.write_filter_failures.inc();
            if matches!(
                e,
                FilterUnavailable::MetaMissing | FilterUnavailable::Incarnation | FilterUnavailable::SegmentMissing(_)
            ) {
                self.recovery_nudge.notify_one();
            }
            AppError::FilterWrite(e)
        };
        let before = self.store.write.state_for_write(name).await.map_err(fail)?;
        if before.dropped.is_some() {
            return Err(AppError::UnknownFilter(name.into()));
        }
        let added: Vec<FilterMeta> = before.write_targets().collect();
        if added.is_empty() {
            let why = if before.stale().next().is_some() {
                FilterUnavailable::Incarnation
            } else {
                FilterUnavailable::MetaMissing
            };
            return Err(fail(why));
        }
        self.add_to(name, &added, &entries).await.map_err(fail)?;
        let puts: Vec<_> = entries.iter().map(|(k, v)| self.keys.put(name, k, v)).collect();
        let stored_at = Instant::now();
        let results: Vec<_> = futures::stream::iter(puts).buffer_unordered(BATCH_CONCURRENCY).collect().await;
        self.metrics.observe_store(Store::Database, stored_at.elapsed());
        if let Some(Err(e)) = results.into_iter().find(|r| r.is_err()) {
            self.metrics.write_database_failures.inc();
            return Err(e.into());
        }
        let after = self.store.write.state_for_write(name).await.map_err(fail)?;
        if after.dropped.is_some() {
            return Err(AppError::UnknownFilter(name.into()));
        }
        if after.lineage != before.lineage {
            return Err(fail(FilterUnavailable::Error(format!(
                "filter {name:?} was dropped and created again while the write ran: not acknowledged"
            ))));
        }
        let named_since: Vec<FilterMeta> = after.write_targets().filter(|m| !added.contains(m)).collect();
        self.add_to(name, &named_since, &entries).await.map_err(fail)?;
        self.metrics.writes.inc_by(entries.len() as u64);
        Ok(())
    }

    /// Adds the entries' keys to each generation, and to its insert journal with the bits in
    /// the same step (see `FilterStore::add`), before the write is acknowledged.
    async fn add_to(
        &self,
        name: &str,
        generations: &[FilterMeta],
        entries: &[(Vec<u8>, Vec<u8>)],
    ) -> Result<(), FilterUnavailable> {
        // Negative control (test builds only): the write is acknowledged without its adds.
        if crate::planted::active(crate::planted::Bug::SkipFilterAdd) {
            return Ok(());
        }
        for meta in generations {
            let hashes: Vec<KeyHash> = entries.iter().map(|(k, _)| hash_key(k, meta.params.seed)).collect();
            self.store.write.add(name, *meta, hashes).await?;
        }
        Ok(())
    }

    /// Deletes a key from the database; its bits stay until the next rebuild.
    pub async fn delete(&self, name: &str, raw_key: &[u8]) -> Result<bool, AppError> {
        let def = self.def(name).await?;
        let key = def.key_format.normalize(raw_key)?;
        let existed = self.keys.delete(name, &key).await?;
        if existed {
            self.metrics.filter(name).deletes.inc();
            self.count_stale(name).await;
        }
        Ok(existed)
    }

    /// Counts a deleted key against every generation whose bits may hold it (the one being
    /// built may have scanned it already). Advisory: the delete stands if this fails, and the
    /// stale-delete rebuild merely comes later.
    async fn count_stale(&self, name: &str) {
        let state = match self.store.write.state_for_write(name).await {
            Ok(state) => state,
            Err(e) => return tracing::warn!(filter = name, cause = %e, "delete not counted: filter state unreadable"),
        };
        for meta in state.write_targets() {
            if let Err(e) = self.store.write.count_deletes(name, meta, 1).await {
                tracing::warn!(filter = name, generation = meta.generation, cause = %e, "delete not counted");
            }
        }
    }

    /// The filter's state, read fresh.
    pub async fn state(&self, name: &str) -> Result<FilterState, AppError> {
        self.store.edge_feed.state(name).await.map_err(AppError::FilterRead)
    }

    async fn active(&self, name: &str) -> Result<FilterMeta, AppError> {
        let state = self.state(name).await?;
        match state.readable() {
            Some(meta) => Ok(meta),
            None if state.dropped.is_some() => Err(AppError::UnknownFilter(name.into())),
            None if state.active_is_stale() => Err(AppError::FilterRead(FilterUnavailable::Incarnation)),
            None => Err(AppError::FilterRead(FilterUnavailable::MetaMissing)),
        }
    }

    /// The manifest the edge reads: params, key format, and what a held segment must be current
    /// to. With an insert journal that is the journal's head alone (an edge's copies name their
    /// own positions, so listing every segment's version would only cost bytes on every
    /// refresh); without one, every segment's version.
    pub async fn manifest(&self, name: &str) -> Result<Manifest, AppError> {
        let def = self.def(name).await?;
        let meta = self.active(name).await?;
        // Every segment must still be readable: a lost one (evicted, deleted) makes the manifest
        // unavailable, so no edge starts from a generation the recovery check will replace.
        let versions = self.store.edge_feed.segment_versions(name, meta).await.map_err(AppError::FilterRead)?;
        // Read after the request arrived: it covers every key acknowledged before.
        let (segment_versions, journal) = match meta.journal {
            true => {
                (Vec::new(), Some(self.store.edge_feed.journal_head(name, meta).await.map_err(AppError::FilterRead)?))
            }
            false => (versions, None),
        };
        Ok(Manifest {
            filter: name.into(),
            key_format: def.key_format,
            generation: meta.generation,
            params: meta.params,
            segment_versions,
            journal,
        })
    }

    /// Up to `max_entries` entries of generation `generation`'s insert journal after `after`,
    /// encoded for the edge, with what lets the edge take the chunk as its next manifest; None
    /// when they are no longer kept (the edge fetches segments).
    pub async fn journal(
        &self,
        name: &str,
        generation: u64,
        after: JournalPosition,
        max_entries: u32,
    ) -> Result<Option<JournalChunk>, AppError> {
        self.def(name).await?;
        // Read after the request arrived and before the entries, as a manifest reads its head.
        let state = self.state(name).await?;
        let Some(meta) = state.generation(generation) else {
            return Err(AppError::NotFound(format!("filter {name:?} has no generation {generation}")));
        };
        if !meta.journal {
            return Err(AppError::NotFound(format!(
                "generation {generation} of filter {name:?} keeps no insert journal (it was named by an origin with journal_enabled = false)"
            )));
        }
        match self.store.edge_feed.read_journal(name, meta, after, max_entries).await.map_err(AppError::FilterRead)? {
            JournalRead::Reset => Ok(None),
            JournalRead::Entries { to, entries, head } => Ok(Some(JournalChunk {
                wire: encode_journal(meta.generation, meta.params.seed, after.added, to, &entries),
                head,
                readable_generation: state.readable().map(|m| m.generation),
            })),
        }
    }

    /// One encoded segment of the active generation, or of the one being built or just
    /// replaced, while its bits are in this incarnation of the filter store: (version, wire
    /// bytes). Never a segment of another incarnation, so no segment identity
    /// (generation, index, version) ever names two different bit sets.
    pub async fn segment(&self, name: &str, generation: u64, index: u32) -> Result<(u64, Vec<u8>), AppError> {
        self.def(name).await?;
        let state = self.state(name).await?;
        let Some(meta) = state.generation(generation).filter(|m| index < m.params.segment_count) else {
            return Err(AppError::NotFound(format!(
                "filter {name:?} has no segment {index} in generation {generation} (active generation {:?})",
                state.active.map(|m| m.generation)
            )));
        };
        // The journal's head first, then the bits: every entry up to the head had its bits set
        // before it was appended, so the bits read after hold them all.
        let head = match meta.journal {
            true => Some(self.store.edge_feed.journal_head(name, meta).await.map_err(AppError::FilterRead)?),
            false => None,
        };
        let bits = self.store.edge_feed.segment(name, meta, index).await.map_err(AppError::FilterRead)?;
        let wire = match head {
            Some(head) => encode_segment_at(&meta.params, generation, index, bits.version, head, &bits.payload),
            None => encode_segment(&meta.params, generation, index, bits.version, &bits.payload),
        }
        .map_err(|e| AppError::FilterRead(FilterUnavailable::Error(e.to_string())))?;
        Ok((bits.version, wire))
    }

    /// The `nodetool tablestats` of a filter.
    pub async fn stats(&self, name: &str) -> Result<FilterStats, AppError> {
        let def = self.def(name).await?;
        // Under the write timeout: stats may wait, and are most wanted when Redis is busiest
        // (a rebuild under write load), where the lookup timeout would turn them into 503s.
        let state = self.store.stats.state_for_write(name).await.map_err(AppError::FilterRead)?;
        if state.dropped.is_some() {
            return Err(AppError::UnknownFilter(name.into()));
        }
        let rebuild = match state.building {
            Some(building) => {
                let published = self.store.stats.progress(name).await.ok().flatten();
                published.filter(|p| p.generation == building.generation).map(|p| p.to_api())
            }
            None => None,
        };
        let Some(meta) = state.readable() else {
            // No bits to describe: a rebuild under way (after a loss), or about to start (a
            // filter created over keys the database holds): what there is to see is its progress.
            let unbuilt = FilterStats {
                filter: name.to_owned(),
                key_format: Some(def.key_format.to_string()),
                capacity: Some(def.capacity),
                target_fp_rate: Some(def.fp_rate),
                building_generation: state.building.map(|m| m.generation),
                rebuild,
                ..FilterStats::default()
            };
            return match state.building {
                Some(_) => Ok(unbuilt),
                None if state.active_is_stale() => Err(AppError::FilterRead(FilterUnavailable::Incarnation)),
                None if state.named().next().is_none() && state.lineage != 0 => Ok(unbuilt),
                None => Err(AppError::FilterRead(FilterUnavailable::MetaMissing)),
            };
        };
        let ones = self.store.stats.count_ones(name, meta).await.map_err(AppError::FilterRead)?;
        let deletes = self.store.stats.deletes(name, meta).await.map_err(AppError::FilterRead)?;
        let memory = self.store.stats.memory_bytes(name, meta).await.map_err(AppError::FilterRead)?;
        let journal = match meta.journal {
            true => Some(self.store.stats.journal_size(name, meta).await.map_err(AppError::FilterRead)?),
            false => None,
        };
        let c = self.metrics.filter(name);
        let (maybes, fps) = (c.filter_maybes.get(), c.false_positives.get());
        let estimated = meta.params.estimated_len(ones);
        let estimated = estimated.is_finite().then_some(estimated);
        let absent_lookups = c.filter_negatives.get() + fps;
        Ok(FilterStats {
            filter: name.to_owned(),
            key_format: Some(def.key_format.to_string()),
            capacity: Some(def.capacity),
            target_fp_rate: Some(def.fp_rate),
            generation: Some(meta.generation),
            building_generation: state.building.map(|m| m.generation),
            rebuild,
            previous_generation: state.previous.map(|m| m.generation),
            k: Some(u32::from(meta.params.k)),
            segment_count: Some(meta.params.segment_count),
            segment_bytes: Some(meta.params.segment_bytes()),
            memory_bytes: memory,
            bits_set: Some(ones),
            fill_ratio: Some(ones as f64 / meta.params.total_bits() as f64),
            estimated_keys: estimated.map(|e| e.round() as u64),
            expected_fp_rate_at_capacity: Some(meta.params.expected_fp_rate(def.capacity)),
            expected_fp_rate_now: estimated.map(|e| meta.params.expected_fp_rate(e as u64)),
            lookups_answered_by_filter: Some(c.filter_negatives.get()),
            filter_maybes: Some(maybes),
            observed_false_positives: Some(fps),
            false_positive_share_of_maybes: (maybes > 0).then(|| fps as f64 / maybes as f64),
            deletes_since_build: Some(deletes),
            journal_entries: journal.map(|j| j.entries),
            journal_bytes: journal.and_then(|j| j.bytes),
            observed_fp_rate: (absent_lookups > 0).then(|| fps as f64 / absent_lookups as f64),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_definite_no_answers_not_seen() {
        assert_eq!(after_filter(&Ok(false)), AfterFilter::AnswerNotSeen);
        assert_eq!(after_filter(&Ok(true)), AfterFilter::AskDatabaseAfterMaybe);
        for unavailable in [
            FilterUnavailable::Timeout,
            FilterUnavailable::Error("connection refused".into()),
            FilterUnavailable::MetaMissing,
            FilterUnavailable::SegmentMissing(3),
        ] {
            assert!(matches!(after_filter(&Err(unavailable)), AfterFilter::AskDatabaseFilterUnavailable(_)));
        }
    }
}
