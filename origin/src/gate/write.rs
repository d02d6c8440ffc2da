//! The write path: filter first, then the database, and the state read again after the
//! database so a rebuild that started meanwhile gets the keys too (the argument is on
//! `Gate::insert_many`). Deletes go to the database alone; their bits stay until a rebuild.

use super::{normalize_batch, Gate, BATCH_CONCURRENCY};
use crate::error::AppError;
use crate::lease::{boot_clock, WriteDeadline};
use crate::store::{DatabaseError, FilterUnavailable, Generation, StoreResult};
use bloomgate_filter::{hash_key, KeyHash};
use futures::StreamExt;
use std::time::{Duration, Instant};

impl Gate {
    /// Stores one key: filter first, then the database.
    pub async fn insert(&self, name: &str, raw_key: &[u8], value: &[u8]) -> Result<(), AppError> {
        let def = self.def(name).await?;
        let key = def.key_format.normalize(raw_key)?;
        self.insert_many(name, vec![(key, value.to_vec())]).await
    }

    /// Stores a batch of raw keys with empty values, all or (on bad input) none.
    pub async fn insert_batch(&self, name: &str, raw: &[String]) -> Result<usize, AppError> {
        let def = self.def(name).await?;
        let keys = normalize_batch(&def, raw)?;
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
    ///
    /// Last, the read leases: the write is acknowledged only once `W` of every generation either
    /// read named has passed since the adds answered (`lease`), so no origin's local copy can
    /// still answer "no" for it from a lease older than the add.
    ///
    /// A write that finds the bits lost (Redis back empty or from an older snapshot, metadata or
    /// a segment gone) is not refused at once: a rebuild (nudged here) names a generation that
    /// can take it within a second or so, and the write then starts over, as a client's retry
    /// would, up to `write_recovery_wait`. It is refused only while no generation can take it.
    async fn insert_many(&self, name: &str, entries: Vec<(Vec<u8>, Vec<u8>)>) -> Result<(), AppError> {
        self.may_change()?;
        let give_up_at = Instant::now() + self.write_recovery_wait;
        let mut tried = Vec::new();
        let mut waited = false;
        loop {
            tried.clear();
            let result = self.insert_once(name, &entries, &mut tried).await;
            let lost = matches!(&result, Err(AppError::FilterWrite(e)) if bits_lost(e));
            // With no time left (or the wait off) the write is refused at once, without the
            // state read a wait would start with.
            let retry = lost && Instant::now() < give_up_at && {
                if !waited {
                    self.metrics.writes.recovery_waits.inc();
                    waited = true;
                }
                self.wait_for_new_generation(name, &tried, give_up_at).await
            };
            if !retry {
                if matches!(result, Err(AppError::FilterWrite(_))) {
                    self.metrics.writes.filter_failures.inc();
                }
                return result;
            }
        }
    }

    /// Waits, until `give_up_at`, for the filter's state to name a generation this store holds
    /// that the failed attempt did not try (or for the filter to be dropped, which the next
    /// attempt answers): whether the write should start over.
    async fn wait_for_new_generation(&self, name: &str, tried: &[Generation], give_up_at: Instant) -> bool {
        loop {
            if let Ok(state) = self.store.write.state_for_write(name).await {
                if state.dropped.is_some() || state.write_targets().any(|m| !tried.contains(&m)) {
                    return true;
                }
            }
            if Instant::now() + RECOVERY_POLL >= give_up_at {
                return false;
            }
            tokio::time::sleep(RECOVERY_POLL).await;
        }
    }

    /// One attempt at the write (see `insert_many`); `tried` gets the generations it added to
    /// or found, so a retry waits for another.
    async fn insert_once(
        &self,
        name: &str,
        entries: &[(Vec<u8>, Vec<u8>)],
        tried: &mut Vec<Generation>,
    ) -> Result<(), AppError> {
        let fail = |e: FilterUnavailable| {
            if bits_lost(&e) {
                self.recovery_nudge.notify_one();
            }
            AppError::FilterWrite(e)
        };
        let before = self.store.write.state_for_write(name).await.map_err(fail)?;
        if before.dropped.is_some() {
            return Err(AppError::UnknownFilter(name.into()));
        }
        let added: Vec<Generation> = before.write_targets().collect();
        tried.extend(&added);
        if added.is_empty() {
            let why = if before.stale().next().is_some() {
                FilterUnavailable::Incarnation
            } else {
                FilterUnavailable::MetaMissing
            };
            return Err(fail(why));
        }
        // The read leases to wait out before acknowledging (see `lease`): of every generation a
        // state read named, stale ones too, from when the adds answered.
        let mut deadline = WriteDeadline::default();
        self.add_to(name, &added, entries).await.map_err(fail)?;
        deadline.add_answered(self.clock.now(), before.named().map(|m| m.lease));
        let puts: Vec<_> = entries.iter().map(|(k, v)| self.database.put(name, k, v)).collect();
        let stored_at = Instant::now();
        let (results, logged) = tokio::join!(
            futures::stream::iter(puts).buffer_unordered(BATCH_CONCURRENCY).collect::<Vec<_>>(),
            self.log_recent_writes(name, entries)
        );
        self.metrics.writes.database_seconds.observe(stored_at.elapsed().as_secs_f64());
        if let Some(Err(e)) = results.into_iter().chain([logged]).find(|r| r.is_err()) {
            self.metrics.writes.database_failures.inc();
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
        let named_since: Vec<Generation> = after.write_targets().filter(|m| !added.contains(m)).collect();
        tried.extend(&named_since);
        self.add_to(name, &named_since, entries).await.map_err(fail)?;
        let newly_named = after.named().filter(|m| !before.named().any(|b| b == *m));
        deadline.add_answered(self.clock.now(), named_since.iter().copied().chain(newly_named).map(|m| m.lease));
        self.wait_out_leases(deadline).await;
        self.metrics.writes.written.inc_by(entries.len() as u64);
        Ok(())
    }

    /// Logs the entries' keys in `recent_writes` (when the cluster version asks it), sent with
    /// their rows: the write waits for the slower of the two, and is acknowledged only once both
    /// are stored, so recovery can replay every acknowledged key from the log.
    async fn log_recent_writes(&self, name: &str, entries: &[(Vec<u8>, Vec<u8>)]) -> Result<(), DatabaseError> {
        if !self.logs_recent_writes() {
            return Ok(());
        }
        let keys: Vec<&[u8]> = entries.iter().map(|(k, _)| k.as_slice()).collect();
        self.database.log_recent_writes(name, &keys, crate::clock::now_ms()).await
    }

    /// Waits until `deadline`, overlapped with the database write and the second state read
    /// before it: a write costs `max(W, database write)`, not both.
    async fn wait_out_leases(&self, deadline: WriteDeadline) {
        let Some(at) = deadline.at() else { return };
        // Negative control (test builds only): acknowledged before the leases ran out.
        if crate::planted::active(crate::planted::Bug::SkipLeaseWait) {
            return;
        }
        let waited = at.saturating_since(self.clock.now());
        boot_clock::sleep_until(self.clock.as_ref(), at).await;
        self.metrics.leases.write_waited(waited);
    }

    /// Adds the entries' keys to each generation, and to its insert journal with the bits in
    /// the same step (see `WriteStore::add`), before the write is acknowledged.
    async fn add_to(&self, name: &str, generations: &[Generation], entries: &[(Vec<u8>, Vec<u8>)]) -> StoreResult<()> {
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
        self.may_change()?;
        let def = self.def(name).await?;
        let key = def.key_format.normalize(raw_key)?;
        let existed = self.database.delete(name, &key).await?;
        if existed {
            self.metrics.filters.counters(name).deletes.inc();
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
}

/// How often a write waiting for a rebuild's generation reads the filter's state.
const RECOVERY_POLL: Duration = Duration::from_millis(50);

/// Whether the filter store answered that the bits a write needs are lost (not down, not slow):
/// the recovery check rebuilds them, and a new generation can take the write.
fn bits_lost(e: &FilterUnavailable) -> bool {
    matches!(e, FilterUnavailable::MetaMissing | FilterUnavailable::Incarnation | FilterUnavailable::SegmentMissing(_))
}
