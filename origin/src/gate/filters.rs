//! Filters as users manage them: create, list, drop — and why a filter dropped and created
//! again under the same name never lets an old bit, an old cache or a racing write answer "no"
//! for a key the new filter was told about.
//!
//! A drop runs in four steps, each finished before the next starts:
//! 1. *Tombstone.* Every generation the filter state names is retired (its bits deleted, so a
//!    reader still holding it falls through; adds to it turn into no-ops), then the state is
//!    replaced by a tombstone naming no generation, in one compare-and-set on its revision
//!    (`FilterState::tombstone`). From then on every fresh state read says "dropped": lookups
//!    answer 404 "no such filter" (a problem, never a "not seen"), writes are refused, rebuilds
//!    refuse to name a generation, the recovery check leaves it alone.
//! 2. *Keys* (`?keys=delete` only): every key stored under the name is deleted from the
//!    database. The definition still exists, so no filter can be created under the name
//!    meanwhile, and no key of a new filter is deleted.
//! 3. *Leftovers:* the bits and journals of any generation (those a lost state named too),
//!    delete counts, a rebuild's progress and lease (`LifecycleStore::clear_dropped`).
//! 4. *Definition*, last: the tombstone's facts are written to the database as the name's drop
//!    record (`store::drop_record`), then the definition is deleted. Creating a filter inserts
//!    its definition only if none exists, so a filter can be created again under the name only
//!    once all of the above is done.
//!
//! Why nothing old answers "no" for the new filter's keys:
//! - *Origins.* A lookup answers "no" only from a generation a state named: read fresh, or
//!   cached for `meta_cache_ms`, or a local copy, which answers only after a journal read that
//!   started after the lookup arrived, or under a read lease. Step 1 waits out every retired
//!   generation's lease before the tombstone (`lease`), so a lease that holds after it came from
//!   a read sent after the retirement, which is never complete. By the time a filter can be
//!   created again (after step 4), every generation of the old one is retired or deleted, and a
//!   retired journal cannot be read: whatever an origin still holds of the old filter falls
//!   through to the database.
//!   There, another origin's cached definition of the old filter may still be read for up to
//!   `meta_cache_ms`; the new filter keeps the old one's key format (the tombstone holds it),
//!   so that definition reads every key as the new one does.
//! - *Edges.* An edge answers "no" only from a segment whose header names the generation and
//!   params of a manifest it asked for at most `FRESHNESS_SECS` (S) ago. The new filter's
//!   generations are numbered after every one the old filter used (the tombstone keeps the
//!   newest; `FilterState::next_lineage`), so no segment of the old filter, in isolate memory or
//!   the Cache API, is usable under a manifest of the new one, and no segment URL names two bit
//!   sets. Under a manifest of the old filter the edge may say "no" for at most S after it
//!   asked, which was before the drop, so before any write to the new filter: the same bound
//!   as for any write.
//! - *Racing writes.* A write reads the state before its filter adds and again after its
//!   database write (`Gate::insert_many`), and is acknowledged only if neither read is a
//!   tombstone and both name the same lineage. An acknowledged write's second read thus came
//!   before step 1, so its key was in the database before step 2 started: `keys=delete` deletes
//!   it with the filter, `keys=keep` keeps it. A write that found the filter dropped and created
//!   again between its two reads (its key possibly deleted in between) fails rather than be
//!   acknowledged into the new filter.
//! - *The new filter's first bits.* A filter starts from empty bits only when the database
//!   holds no key under its name (`Database::has_keys`); otherwise (keys kept by a drop, a write
//!   that failed after its database write) its first generation is built from the database by
//!   a rebuild, and lookups read the database until then.
//! - *Rebuilds and recovery.* Every state change is a compare-and-set on the revision. A
//!   rebuild refuses a tombstone; one that read the state before the tombstone fails its next
//!   compare-and-set and retires its own generation.
//!
//! The filter store may lose the tombstone (a flush, a restart without persistence); the drop
//! record does not go with it. A create reads the record after its definition is inserted,
//! which is after the drop deleted the old definition, so after the record was written: it
//! keeps the old key format and numbers its generations after the record's, whatever the
//! filter store still holds.

use super::{CreateFilter, Gate};
use crate::clock::now_ms;
use crate::error::AppError;
use crate::lease::ReadConsistency;
use crate::sizing::check_size;
use crate::store::{Dropped, FilterDef, FilterState, FilterUnavailable, Generation};
use bloomgate_client::api::{DropKeys, FilterDropped, FilterList, FilterSummary};
use bloomgate_filter::{validate_filter_name, KeyFormat, Params, SizingOptions};
use futures::StreamExt;

/// Result of creating a filter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Created {
    /// Made now, from empty bits: the database holds no key under its name.
    New,
    /// Made now, without bits yet: the database holds keys under its name (kept by a drop),
    /// so its first generation must be built from them by a rebuild.
    NewFromKeys,
    /// Already existed with the same settings.
    Existing,
}

/// Times the drop's tombstone is tried when the state changed first (a rebuild switching).
const TOMBSTONE_ATTEMPTS: usize = 5;

/// How often a create waiting for a rebuild's lease asks again.
const CREATE_LEASE_POLL: std::time::Duration = std::time::Duration::from_millis(50);

/// States read at once for the filter list.
const LIST_CONCURRENCY: usize = 16;

impl Gate {
    /// Creates a filter, or confirms an identical one exists. A name whose filter was dropped
    /// keeps its key format (see the module doc).
    pub async fn create_filter(&self, name: &str, request: CreateFilter) -> Result<Created, AppError> {
        validate_filter_name(name)?;
        self.may_change()?;
        let options = SizingOptions { seed: rand::random(), segment_bytes: request.segment_bytes };
        let params = Params::for_capacity_with(request.capacity, request.fp_rate, options)?;
        check_size(&params, self.max_filter_bytes)?;
        let wanted = FilterDef {
            name: name.into(),
            key_format: request.key_format,
            capacity: request.capacity,
            fp_rate: request.fp_rate,
            segment_bytes: request.segment_bytes,
        };
        // Checked before anything is stored, and again after (a drop may finish in between).
        let state = self.state_if_any(name).await?;
        same_key_format(name, dropped_of(state.as_ref(), self.database.dropped(name).await?), wanted.key_format)?;
        let (stored, created_now) = self.database.create_filter(&wanted).await?;
        if stored != wanted {
            return Err(AppError::Conflict(format!(
                "filter {name:?} exists with capacity {}, fp_rate {}, key_format {}, segment_bytes {}",
                stored.capacity, stored.fp_rate, stored.key_format, stored.segment_bytes
            )));
        }
        // The definition was inserted after any earlier drop deleted it, so after that drop
        // wrote its record: the record is read here whatever became of the filter store.
        let state = self.state_if_any(name).await?;
        let record = self.database.dropped(name).await?;
        let dropped = dropped_of(state.as_ref(), record);
        if let (Err(e), Some(dropped)) = (same_key_format(name, dropped, wanted.key_format), dropped) {
            if created_now {
                self.database.drop_filter(name, dropped).await?;
            }
            return Err(e);
        }
        let floor = record.map_or(0, |r| r.last_generation + 1);
        self.defs.insert(stored);
        let mode = request.read_consistency.unwrap_or(self.lease.default_mode);
        match (state, created_now) {
            (Some(state), _) if state.dropped.is_none() => match (request.read_consistency, state.read_consistency) {
                (Some(asked), Some(has)) if asked != has => Err(AppError::Conflict(format!(
                    "filter {name:?} exists with read_consistency {}; drop it and create it again to change that",
                    has.as_str()
                ))),
                _ => Ok(Created::Existing),
            },
            (Some(tombstone), true) => self.start_lineage(name, params, mode, Some(tombstone), floor).await,
            (Some(_), false) => Err(AppError::Conflict(format!(
                "filter {name:?} is being dropped: send DELETE /v1/filters/{name} again to finish the drop, then create it"
            ))),
            (None, true) => self.start_lineage(name, params, mode, None, floor).await,
            (None, false) => Err(AppError::FilterWrite(FilterUnavailable::Error(
                "the filter exists but its bits are gone from the filter store; run `bloomgate-origin rebuild` to rebuild them from the database".into(),
            ))),
        }
    }

    /// The filter's state, None if the filter store has none.
    async fn state_if_any(&self, name: &str) -> Result<Option<FilterState>, AppError> {
        match self.store.lifecycle.state_for_write(name).await {
            Ok(state) => Ok(Some(state)),
            Err(FilterUnavailable::MetaMissing) => Ok(None),
            Err(e) => Err(AppError::FilterWrite(e)),
        }
    }

    /// The first state of a new lineage of `name`, in place of `replaced` (a tombstone, or
    /// nothing), numbered from `floor` on (after the drop record's generations), read in `mode`: a generation of empty bits when the database holds no key under
    /// the name, else no generation yet (a rebuild builds it from the keys, in `mode`).
    ///
    /// Named under the filter's rebuild lease. The definition is already in the database, so
    /// any origin's recovery check may see it before the state exists and take the state for
    /// lost; a rebuild for a lost state deletes every generation it finds unnamed
    /// (`LifecycleStore::delete_orphans`), which would be this one between its creation and
    /// its naming. Under the lease no rebuild runs meanwhile (and a recovery check sees the
    /// lease and leaves the filter alone); one that took the lease first named the first
    /// generation itself, which the state read under the lease then finds.
    async fn start_lineage(
        &self,
        name: &str,
        params: Params,
        mode: ReadConsistency,
        replaced: Option<FilterState>,
        floor: u64,
    ) -> Result<Created, AppError> {
        let owner = self.take_lease_for_create(name).await?;
        let started = async {
            let replaced = match self.state_if_any(name).await? {
                // A rebuild that held the lease before this create named the first generation.
                Some(state) if state.dropped.is_none() => return Ok(Created::New),
                now => now.or(replaced),
            };
            self.name_first_generation(name, params, mode, replaced, floor).await
        }
        .await;
        if let Err(e) = self.store.lifecycle.release_lease(name, &owner).await {
            tracing::warn!(filter = name, cause = %e, "create: the rebuild lease was not released; it expires");
        }
        started
    }

    /// Takes `name`'s rebuild lease for a create, waiting (bounded by the lease's life) while
    /// a rebuild holds it.
    async fn take_lease_for_create(&self, name: &str) -> Result<String, AppError> {
        let owner = format!("create-{:016x}", rand::random::<u64>());
        let deadline = std::time::Instant::now() + self.rebuild_lease;
        loop {
            if self.store.lifecycle.lease(name, &owner, self.rebuild_lease).await.map_err(AppError::FilterWrite)? {
                return Ok(owner);
            }
            if std::time::Instant::now() >= deadline {
                return Err(AppError::FilterWrite(FilterUnavailable::Error(format!(
                    "a rebuild of filter {name:?} holds its lease: retry the create"
                ))));
            }
            tokio::time::sleep(CREATE_LEASE_POLL).await;
        }
    }

    /// The state of a new lineage, written in place of `replaced`, under the lease.
    async fn name_first_generation(
        &self,
        name: &str,
        params: Params,
        mode: ReadConsistency,
        replaced: Option<FilterState>,
        floor: u64,
    ) -> Result<Created, AppError> {
        let expected = replaced.map(|s| s.revision);
        let lineage = replaced.unwrap_or_default().next_lineage(now_ms()).max(floor);
        let read_consistency = Some(mode);
        if self.database.has_keys(name).await? {
            let state = FilterState { lineage, read_consistency, ..FilterState::default() };
            self.store.lifecycle.replace_state(name, expected, state).await.map_err(AppError::FilterWrite)?;
            return Ok(Created::NewFromKeys);
        }
        let incarnation = self.store.lifecycle.incarnation().await.map_err(AppError::FilterWrite)?;
        let lease = self.lease.terms_for(read_consistency);
        let meta = Generation { generation: lineage, params, incarnation, journal: self.journal_enabled, lease };
        self.store.lifecycle.create_generation(name, meta).await.map_err(AppError::FilterWrite)?;
        let state = FilterState { active: Some(meta), lineage, read_consistency, ..FilterState::default() };
        // Only if the state did not change meanwhile (a drop's tombstone, or a rebuild whose
        // lease expired under this create), which then owns the filter.
        if !self.store.lifecycle.replace_state(name, expected, state).await.map_err(AppError::FilterWrite)? {
            self.store.lifecycle.retire_generation(name, meta).await.map_err(AppError::FilterWrite)?;
        }
        Ok(Created::New)
    }

    /// Every filter, by name, with the generation answering its lookups.
    pub async fn list_filters(&self) -> Result<FilterList, AppError> {
        let mut defs = self.database.filters().await?;
        defs.sort_by(|a, b| a.name.cmp(&b.name));
        let states: Vec<_> = defs.iter().map(|def| self.store.lifecycle.state_for_write(&def.name)).collect();
        let states: Vec<_> = futures::stream::iter(states).buffered(LIST_CONCURRENCY).collect().await;
        let filters = defs
            .into_iter()
            .zip(states)
            .map(|(def, state)| {
                let state = state.ok();
                FilterSummary {
                    key_format: def.key_format.to_string(),
                    capacity: def.capacity,
                    fp_rate: def.fp_rate,
                    segment_bytes: def.segment_bytes,
                    generation: state.and_then(|s| s.readable()).map(|m| m.generation),
                    dropping: state.is_some_and(|s| s.dropped.is_some()),
                    name: def.name,
                }
            })
            .collect();
        Ok(FilterList { filters })
    }

    /// Drops a filter in the four steps of the module doc; `keys` says what happens to its keys
    /// in the database. A drop that stopped part-way (its origin died, a store failed: 503) is
    /// finished by asking again: every step is idempotent.
    pub async fn drop_filter(&self, name: &str, keys: DropKeys, concurrency: usize) -> Result<FilterDropped, AppError> {
        validate_filter_name(name)?;
        self.may_change()?;
        let def = self.database.filter(name).await?.ok_or_else(|| AppError::UnknownFilter(name.into()))?;
        let dropped = self.bury(name, def.key_format).await?;
        self.forget_meta(name);
        let keys_deleted = match keys {
            DropKeys::Delete => Some(self.database.delete_keys(name, concurrency).await?),
            DropKeys::Keep => None,
        };
        self.store.lifecycle.clear_dropped(name).await.map_err(AppError::DropStopped)?;
        self.database.drop_filter(name, dropped).await?;
        self.defs.forget(name);
        tracing::info!(filter = name, keys = keys.as_str(), keys_deleted, "filter dropped");
        Ok(FilterDropped { filter: name.to_owned(), dropped: true, keys, keys_deleted })
    }

    /// Step 1 of a drop: every named generation retired, then the tombstone in their place;
    /// what the tombstone holds (kept by step 4 in the database too).
    async fn bury(&self, name: &str, key_format: KeyFormat) -> Result<Dropped, AppError> {
        for _ in 0..TOMBSTONE_ATTEMPTS {
            let (state, expected) = match self.store.lifecycle.state_for_write(name).await {
                Ok(state) => (state, Some(state.revision)),
                Err(FilterUnavailable::MetaMissing) => (FilterState::default(), None),
                Err(e) => return Err(AppError::DropStopped(e)),
            };
            if let Some(dropped) = state.dropped {
                return Ok(dropped);
            }
            // Bits gone first, then every lease on them waited out, name last: a reader holding
            // a generation falls through (see `lease`).
            let named: Vec<Generation> = state.named().collect();
            self.store.lifecycle.retire_and_wait(name, &named).await.map_err(AppError::DropStopped)?;
            if expected.is_none() {
                // No state: what it named, and on which terms, is unknown.
                tokio::time::sleep(self.lease.unknown_terms_wait()).await;
            }
            let tombstone = state.tombstone(key_format, now_ms());
            let replaced =
                self.store.lifecycle.replace_state(name, expected, tombstone).await.map_err(AppError::DropStopped)?;
            match tombstone.dropped {
                Some(dropped) if replaced => return Ok(dropped),
                _ => {}
            }
        }
        Err(AppError::DropStopped(FilterUnavailable::Error(format!(
            "the state of filter {name:?} kept changing under the drop (a rebuild switching generations)"
        ))))
    }
}

/// What the last drop of `name` left: the filter store's tombstone, or, when the filter store
/// lost it (or never had it), the database's drop record. The tombstone comes first: it is the
/// newer when both exist (a drop writes its record last).
fn dropped_of(state: Option<&FilterState>, record: Option<Dropped>) -> Option<Dropped> {
    state.and_then(|s| s.dropped).or(record)
}

/// Refuses a key format other than the one a dropped filter of the name had (see the module
/// doc); any format for a name never dropped.
fn same_key_format(name: &str, dropped: Option<Dropped>, wanted: KeyFormat) -> Result<(), AppError> {
    match dropped {
        Some(dropped) if dropped.key_format != wanted => Err(AppError::Conflict(format!(
            "filter {name:?} was dropped with key_format {}; a filter created again under the name keeps it (other origins may still read keys with it): use key_format {} or another name",
            dropped.key_format, dropped.key_format
        ))),
        _ => Ok(()),
    }
}
