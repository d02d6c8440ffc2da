//! The lookup path: filter first; the database on "maybe", or when the filter cannot answer.
//! The rule that makes it safe is [`after_filter`]: only a definite "no" from the filter
//! answers "not seen"; every failure falls through, never reads as "no".
//!
//! The filter is asked through a local copy when one is held and can answer, under its read
//! lease or behind its read barrier (`local_copy`), else the filter store; the readable generation comes from a
//! metadata cache whose every entry stays safe to read, however old (see `Gate::meta`).

use super::lookup_record::{DatabaseRead, FilterAsked, LookupTrace};
use super::{normalize_batch, Gate, BATCH_CONCURRENCY};
use crate::error::AppError;
use crate::metrics::{Fallthrough, FilterRead, Store};
use crate::store::{FilterUnavailable, Generation, StoreResult};
use bloomgate_filter::{hash_key, MAX_KEY_BYTES};
use futures::StreamExt;
use std::sync::Arc;
use std::time::Instant;

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
pub fn after_filter(answer: &StoreResult<bool>) -> AfterFilter {
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
        FilterUnavailable::UnknownFormat { .. } => Fallthrough::UnknownFormat,
        // Never a fall-through (see `after_filter`); counted as what it looks like to the
        // bits: no metadata.
        FilterUnavailable::Dropped => Fallthrough::MetaMissing,
    }
}

impl Gate {
    /// The generation lookups read, cached for `cache_ttl`.
    ///
    /// A cached copy never makes a "no" wrong, however old: every generation a state names
    /// takes every add until it is retired, and a retired generation's bits are gone before
    /// the state stops naming it, so reading it falls through (see `store::state`). The cache
    /// is dropped whenever the filter could not answer, so the next lookup reads the state.
    ///
    /// Fresh means read less than `cache_ttl` before `now`, the lookup's arrival: a lookup
    /// reads the clock once for its whole path (an older `now` only keeps an entry longer, and
    /// every entry is safe to read however old).
    async fn meta(&self, name: &str, now: Instant) -> StoreResult<Generation> {
        let cached = self.metas.read(name, |slot| slot.load().as_deref().copied()).flatten();
        if let Some((meta, at)) = cached {
            if now.saturating_duration_since(at) < self.cache_ttl {
                return Ok(meta);
            }
        }
        let asked = Instant::now();
        let meta = self.store.lookup.state(name).await.and_then(|s| s.readable_or_why());
        match &meta {
            Ok(m) => self.metas.read_or_insert_with(name, Arc::default, |slot| slot.store(Some(Arc::new((*m, asked))))),
            Err(_) => self.forget_meta(name),
        };
        meta
    }

    pub(super) fn forget_meta(&self, name: &str) {
        self.metas.read(name, |slot| slot.store(None));
    }

    /// Asks the filter about `key`: through the local copy when it can answer, else the
    /// store; the answer, which store gave it, and how the filter was read (None: it was not,
    /// the readable generation being unknown, or the copy failed).
    async fn ask_filter(&self, name: &str, key: &[u8], now: Instant) -> (StoreResult<bool>, Store, Option<FilterRead>) {
        let meta = match self.meta(name, now).await {
            Ok(meta) => meta,
            Err(e) => return (Err(e), Store::Redis, None),
        };
        let hash = hash_key(key, meta.params.seed);
        // The local copy answers only under its lease or behind its read barrier (see
        // `local_copy`); when it cannot, the store is asked as if there were none.
        let held = match &self.copies {
            Some(copies) if meta.journal => copies.may_contain(name, meta, &hash).await,
            _ => None,
        };
        let (answer, asked, via) = match held {
            Some(answer) => {
                let via = answer.as_ref().ok().map(|copy| copy.via);
                (answer.map(|copy| copy.maybe), Store::LocalCopy, via)
            }
            None => (self.store.lookup.may_contain(name, meta, hash).await, Store::Redis, Some(FilterRead::Redis)),
        };
        if answer.is_err() {
            self.forget_meta(name);
        }
        (answer, asked, via)
    }

    /// Looks up one key.
    pub async fn lookup(&self, name: &str, raw_key: &[u8]) -> Result<Answer, AppError> {
        self.lookup_arrived(name, raw_key, Instant::now()).await
    }

    /// [`Gate::lookup`] of a request that arrived at `arrived` (the HTTP lane's clock read):
    /// the one clock read before the filter answers, shared by the definition's and the
    /// metadata's freshness and the lookup's latency.
    pub async fn lookup_arrived(&self, name: &str, raw_key: &[u8], arrived: Instant) -> Result<Answer, AppError> {
        // A fresh definition is read in place (a held name is a valid one); otherwise asked
        // for as every other path asks.
        let key_format = match self.defs.read_fresh(name, arrived, |def| def.key_format) {
            Some(format) => format,
            None => self.def(name).await?.key_format,
        };
        // Normalised on the stack: a lookup allocates no copy of its key.
        let mut key = [0u8; MAX_KEY_BYTES];
        let len = key_format.normalize_into(raw_key, &mut key)?;
        let (answer, ended) = self.lookup_normalized(name, &key[..len], Some(arrived)).await;
        self.metrics.lookups.observe_single(ended.saturating_duration_since(arrived));
        answer
    }

    /// Looks up one normalised key asked at `asked` (None: when it starts running, as a batch's
    /// keys wait their turn), then records what it did (`lookup_record`); the answer, and when
    /// it was known.
    async fn lookup_normalized(
        &self,
        name: &str,
        key: &[u8],
        asked: Option<Instant>,
    ) -> (Result<Answer, AppError>, Instant) {
        let asked = asked.unwrap_or_else(Instant::now);
        let mut trace = LookupTrace::default();
        let answer = self.decide(name, key, asked, &mut trace).await;
        self.record_lookup(name, key, &trace);
        // A "no" ends when the filter answers (the clock was read then); anything else now.
        (answer, trace.answered_at.unwrap_or_else(Instant::now))
    }

    /// The lookup's decision, top to bottom: the filter, then the database on "maybe" or when
    /// the filter cannot answer. What happened goes into `trace`, for the metrics.
    async fn decide(
        &self,
        name: &str,
        key: &[u8],
        asked_at: Instant,
        trace: &mut LookupTrace,
    ) -> Result<Answer, AppError> {
        let step = if self.filter_enabled {
            let (answer, asked, via) = self.ask_filter(name, key, asked_at).await;
            let answered_at = Instant::now();
            trace.filter =
                Some(FilterAsked { store: asked, took: answered_at.saturating_duration_since(asked_at), via });
            trace.answered_at = Some(answered_at).filter(|_| matches!(answer, Ok(false)));
            after_filter(&answer)
        } else {
            AfterFilter::AskDatabaseFilterUnavailable(Fallthrough::Disabled)
        };
        trace.step = Some(step);
        match step {
            AfterFilter::AnswerNotSeen => {
                return Ok(Answer { seen: false, answered_by: AnsweredBy::Filter, value: None })
            }
            AfterFilter::AskDatabaseAfterMaybe => {}
            AfterFilter::AskDatabaseFilterUnavailable(reason) => {
                if reason.needs_recovery() {
                    self.recovery_nudge.notify_one();
                }
            }
            AfterFilter::NoSuchFilter => return Err(AppError::UnknownFilter(name.into())),
        }
        let asked = Instant::now();
        let stored = self.database.get(name, key).await;
        trace.database = Some(DatabaseRead { took: asked.elapsed(), found: stored.as_ref().ok().map(Option::is_some) });
        let stored = stored?;
        Ok(Answer { seen: stored.is_some(), answered_by: AnsweredBy::Database, value: stored })
    }

    /// Looks up a batch; answers in request order.
    pub async fn lookup_many(&self, name: &str, raw: &[String]) -> Result<Vec<Answer>, AppError> {
        let def = self.def(name).await?;
        let keys = normalize_batch(&def, raw)?;
        // Futures collected first: a lazy `map` closure in the stream type trips the compiler's
        // higher-ranked `Send` check in handlers.
        // Each key is counted as a single lookup is (who answered, store latency); the batch is
        // timed as a whole.
        let started = Instant::now();
        let lookups: Vec<_> = keys.iter().map(|k| self.lookup_normalized(name, k, None)).collect();
        let answers = futures::stream::iter(lookups).buffered(BATCH_CONCURRENCY).collect::<Vec<_>>().await;
        let answers = answers.into_iter().map(|(answer, _)| answer).collect();
        self.metrics.lookups.observe_batch(started.elapsed());
        answers
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
