//! One generation of a filter held in this process, and the read barrier in front of it.
//!
//! The copy is the generation's segments as read after the journal's head at load time, plus
//! every journal entry applied since: a superset of the bits of every add that reached the
//! journal up to the position it has caught up to. It answers a lookup only after a catch-up
//! round that *started after the lookup arrived* has brought it to the journal's head (see
//! [`super::rounds`]), so an add acknowledged by any origin before the lookup arrived is in it.
//! Every other outcome (the round failed, the journal is gone or trimmed past the copy, the
//! store restarted) leaves the lookup to the filter store, exactly as without a copy.

use super::rounds::{Outcome, Rounds};
use crate::store::{FilterMeta, FilterStore, FilterUnavailable, JournalRead};
use bloomgate_filter::{BloomFilter, JournalPosition, KeyHash};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;
use tokio::sync::{watch, Notify};

/// Journal entries asked for per read in a round.
pub const ENTRIES_PER_READ: u32 = 1024;

/// Reads one round may make before the copy counts as too far behind to catch up entry by
/// entry (it is then loaded again): a copy runs a round at least every idle interval, so only
/// a write burst of over 16k add calls within one round gets here.
pub const MAX_READS_PER_ROUND: u32 = 16;

/// A generation's bits in process, with its read barrier.
pub struct HeldCopy {
    /// The generation held, with the store incarnation its bits came from.
    pub meta: FilterMeta,
    bits: BloomFilter,
    rounds: Mutex<Rounds>,
    /// The number of the newest round that ended, for lookups waiting on one.
    finished: watch::Sender<u64>,
    /// Why the last round failed, while it is the newest.
    failure: Mutex<Option<FilterUnavailable>>,
    /// Wakes the catch-up task: a lookup wants a round.
    wake: Notify,
    /// When a lookup last used the copy, in ms since `created`.
    last_used_ms: AtomicU64,
    created: Instant,
}

/// How a catch-up round ended.
#[derive(Debug)]
pub enum RoundEnd {
    /// The copy holds every entry up to the head the round read.
    Current,
    /// The store did not answer in time or failed: the copy is kept, the next round tries again.
    Unavailable(FilterUnavailable),
    /// The copy can never be brought up to date again (the journal is gone, in another store
    /// incarnation, or trimmed past the copy's position): it must be dropped and loaded anew.
    Stale(String),
}

impl HeldCopy {
    /// A copy of `meta`'s bits.
    pub fn new(meta: FilterMeta, bits: BloomFilter) -> HeldCopy {
        HeldCopy {
            meta,
            bits,
            rounds: Mutex::default(),
            finished: watch::Sender::new(0),
            failure: Mutex::default(),
            wake: Notify::new(),
            last_used_ms: AtomicU64::new(0),
            created: Instant::now(),
        }
    }

    /// Bytes of bits held.
    pub fn bytes(&self) -> u64 {
        self.meta.params.total_bytes()
    }

    /// Waits for a round that started after this call, then answers from the copy if that round
    /// made it current; otherwise why it could not (None: the copy is stale, ask the store).
    pub async fn may_contain(&self, hash: &KeyHash) -> Result<bool, Option<FilterUnavailable>> {
        self.last_used_ms.store(self.created.elapsed().as_millis() as u64, Ordering::Relaxed);
        // Subscribed before the ticket: a round ending after the ticket is taken is then seen.
        let mut finished = self.finished.subscribe();
        let ticket = self.lock_rounds().ticket();
        self.wake.notify_one();
        loop {
            match self.lock_rounds().outcome(ticket) {
                Outcome::Pending => {}
                Outcome::Current => return Ok(self.bits.may_contain_hash(hash)),
                Outcome::Failed => return Err(self.failure.lock().unwrap_or_else(|e| e.into_inner()).clone()),
            }
            if finished.changed().await.is_err() {
                return Err(None);
            }
        }
    }

    /// How long since a lookup last used the copy.
    pub fn idle_for(&self) -> std::time::Duration {
        let used = std::time::Duration::from_millis(self.last_used_ms.load(Ordering::Relaxed));
        self.created.elapsed().saturating_sub(used)
    }

    /// Starts the round a lookup waits for, if any and none is in flight.
    pub fn start_wanted_round(&self) -> Option<u64> {
        self.lock_rounds().start_wanted()
    }

    /// Starts a round whether or not a lookup waits (none if one is in flight).
    pub fn start_any_round(&self) -> Option<u64> {
        self.lock_rounds().start_any()
    }

    /// Resolves when a lookup has asked for a round since the last call.
    pub async fn round_wanted(&self) {
        self.wake.notified().await
    }

    /// Ends round `round` as `end` says, and wakes the lookups waiting on it.
    pub fn finish_round(&self, round: u64, end: &RoundEnd) {
        // Only a store failure is the waiters' answer; a stale copy sends them to the store.
        let failure = match end {
            RoundEnd::Unavailable(e) => Some(e.clone()),
            RoundEnd::Current | RoundEnd::Stale(_) => None,
        };
        // The failure is set before the round ends: a waiter reading "failed" reads its cause.
        *self.failure.lock().unwrap_or_else(|e| e.into_inner()) = failure;
        self.lock_rounds().finish(round, matches!(end, RoundEnd::Current));
        self.finished.send_replace(round);
    }

    /// No round runs again: every lookup waiting, or arriving later, is failed at once.
    pub fn close(&self) {
        *self.failure.lock().unwrap_or_else(|e| e.into_inner()) = None;
        self.lock_rounds().close();
        self.finished.send_replace(u64::MAX);
    }

    /// Brings the copy from `position` up to the journal's head as read now, applying each entry's
    /// hashes; moves `position` along.
    pub async fn catch_up(&self, store: &dyn FilterStore, filter: &str, position: &mut JournalPosition) -> RoundEnd {
        for _ in 0..MAX_READS_PER_ROUND {
            match store.catch_up_journal(filter, self.meta, *position, ENTRIES_PER_READ).await {
                Ok(JournalRead::Entries { to, entries, head }) => {
                    for hash in entries.iter().flatten() {
                        self.bits.insert_hash_shared(hash);
                    }
                    *position = to;
                    if to.added >= head {
                        return RoundEnd::Current;
                    }
                }
                Ok(JournalRead::Reset) => {
                    return RoundEnd::Stale("the journal no longer holds the entries after the copy's position".into())
                }
                Err(e @ (FilterUnavailable::Timeout | FilterUnavailable::Error(_))) => return RoundEnd::Unavailable(e),
                Err(e) => return RoundEnd::Stale(e.to_string()),
            }
        }
        RoundEnd::Stale(format!(
            "more than {} journal entries behind",
            u64::from(MAX_READS_PER_ROUND) * u64::from(ENTRIES_PER_READ)
        ))
    }

    /// The copy's answer as it stands, without the barrier: what a copy without one would say
    /// (the negative control of the tests).
    #[cfg(test)]
    pub fn may_contain_unguarded(&self, hash: &KeyHash) -> bool {
        self.bits.may_contain_hash(hash)
    }

    fn lock_rounds(&self) -> std::sync::MutexGuard<'_, Rounds> {
        self.rounds.lock().unwrap_or_else(|e| e.into_inner())
    }
}
