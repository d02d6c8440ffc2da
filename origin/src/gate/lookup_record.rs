//! What a lookup did, and the one place it is counted: the decision (`lookup`) fills a
//! [`LookupTrace`] as it goes and counts nothing itself; [`Gate::record_lookup`] turns the trace
//! into the same series, with the same values, as when the counting was woven through it.

use super::lookup::{AfterFilter, AnsweredBy};
use super::Gate;
use crate::metrics::{FilterCounters, FilterRead, Store};
use std::time::Duration;

/// The filter asked: which store answered (or failed), how long it took, and how the filter
/// was read (None: it was not, the readable generation being unknown, or the copy failed).
pub(super) struct FilterAsked {
    pub store: Store,
    pub took: Duration,
    pub via: Option<FilterRead>,
}

/// The database read: how long it took, and whether it found the key (None: it failed).
pub(super) struct DatabaseRead {
    pub took: Duration,
    pub found: Option<bool>,
}

/// Everything a lookup's metrics are made of.
#[derive(Default)]
pub(super) struct LookupTrace {
    /// The filter asked (None: the filter is off).
    pub filter: Option<FilterAsked>,
    /// What the filter's answer led to (None: the lookup ended before it).
    pub step: Option<AfterFilter>,
    /// The database read (None: the filter answered, or there was no filter to read for).
    pub database: Option<DatabaseRead>,
    /// When the filter answered "no", the lookup's end (None: it did not).
    pub answered_at: Option<std::time::Instant>,
}

impl Gate {
    /// Counts what a lookup of `key` in `name` did.
    pub(super) fn record_lookup(&self, name: &str, key: &[u8], trace: &LookupTrace) {
        self.metrics.filters.with_counters(name, |counters| self.record_into(counters, key, trace));
    }

    fn record_into(&self, counters: &FilterCounters, key: &[u8], trace: &LookupTrace) {
        let lookups = &self.metrics.lookups;
        if let Some(asked) = &trace.filter {
            if let Some(via) = asked.via {
                self.metrics.leases.filter_read(via);
                if via == FilterRead::Lease {
                    counters.lease_answers.inc();
                }
            }
            lookups.observe_store(asked.store, asked.took);
        }
        match trace.step {
            Some(AfterFilter::AnswerNotSeen) => {
                counters.filter_negatives.inc();
                counters.absent_keys.insert(key);
                lookups.answered(AnsweredBy::Filter);
            }
            Some(AfterFilter::AskDatabaseAfterMaybe) => {
                counters.filter_maybes.inc();
            }
            Some(AfterFilter::AskDatabaseFilterUnavailable(reason)) => lookups.fallthrough(reason),
            Some(AfterFilter::NoSuchFilter) | None => {}
        }
        let Some(read) = &trace.database else { return };
        lookups.database_reads.inc();
        lookups.observe_store(Store::Database, read.took);
        match read.found {
            None => {
                lookups.database_errors.inc();
            }
            Some(found) => {
                lookups.answered(AnsweredBy::Database);
                if !found && trace.step == Some(AfterFilter::AskDatabaseAfterMaybe) {
                    counters.false_positives.inc();
                    counters.absent_keys.insert(key);
                    counters.false_positive_keys.insert(key);
                }
            }
        }
    }
}
