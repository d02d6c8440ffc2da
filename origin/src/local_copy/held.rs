//! One generation of a filter held in this process, and the read barrier in front of it.
//!
//! The copy is the generation's segments as read after the journal's head at load time, plus
//! every journal entry applied since: a superset of the bits of every add that reached the
//! journal up to the position it has caught up to. It answers a lookup only after a catch-up
//! round that *started after the lookup arrived* has brought it to the journal's head (see
//! [`super::rounds`]), so an add acknowledged by any origin before the lookup arrived is in it.
//! Every other outcome (the round failed, the journal is gone or trimmed past the copy, the
//! store restarted) leaves the lookup to the filter store, exactly as without a copy.
//!
//! A round is run by one of the lookups waiting for it (its *leader*), inside that lookup's own
//! task: no hand-off to another task and back on the way to Redis. The others wait for the
//! round's end; when it ends, one of those holding a later ticket leads the next. A leader that
//! goes away mid-round (its client hung up) ends the round as abandoned on the way out, and the
//! lookups that waited on it ask the store.
//!
//! A copy of a generation named with a read lease (`crate::lease`) answers "no" without a round
//! while its lease holds: L after the newest complete journal read was *sent*, whether that read
//! was a round a lookup led or one of the background reads that keep the lease alive (`tail`).
//! Every round records its send instant before it sends, and publishes it once its entries are in
//! the bits; a lookup loads it before it reads the bits and reads its clock after it arrived.

use super::rounds::{Outcome, Rounds};
use crate::lease::boot_clock::{BootInstant, Clock};
use crate::lease::clock_check::{ClockVerdict, StoreClockCheck};
use crate::lease::LeaseTerms;
use crate::metrics::FilterRead;
use crate::metrics::Metrics;
use crate::store::{CopySource, FilterUnavailable, Generation, JournalPage, JournalRead};
use bloomgate_filter::{BloomFilter, JournalPosition, KeyHash};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// Journal entries asked for per read in a round.
pub const ENTRIES_PER_READ: u32 = 1024;

/// Reads one round may make before the copy counts as too far behind to catch up entry by
/// entry (it is then loaded again): a copy runs a round at least every idle interval, so only
/// a write burst of over 16k add calls within one round gets here.
pub const MAX_READS_PER_ROUND: u32 = 16;

/// A generation's bits in process, with its read barrier.
pub struct HeldCopy {
    /// The generation held, with the store incarnation its bits came from.
    pub meta: Generation,
    filter: String,
    store: Arc<dyn CopySource>,
    metrics: Arc<Metrics>,
    bits: BloomFilter,
    rounds: Mutex<Rounds>,
    /// The journal position the bits are current to. Only the leader of the round in flight
    /// moves it (one round at a time), so the lock is never contended.
    position: Mutex<JournalPosition>,
    /// The number of the newest round that ended, for lookups waiting on one.
    finished: watch::Sender<u64>,
    /// Why the last round failed, while it is the newest.
    failure: Mutex<Option<FilterUnavailable>>,
    /// A lookup used the copy since `idle_for` last looked.
    used: AtomicBool,
    /// When `idle_for` last saw it used, in ms since `created`.
    last_used_ms: AtomicU64,
    /// When the last round ended, in ms since `created`.
    last_round_ms: AtomicU64,
    created: Instant,
    /// The generation's read lease, if it has usable terms.
    lease: Option<LeaseTerms>,
    /// The boot-clock instant (ns) at which the newest complete journal read was sent, published
    /// after its entries were applied; 0: none yet.
    lease_from: AtomicU64,
    /// Closed (as `rounds` says), for the lease's lock-free path.
    closed: AtomicBool,
    /// Woken when a lookup finds the lease lapsed (the tail reads again at once).
    lapse: tokio::sync::Notify,
    clock: Arc<dyn Clock>,
    /// This clock against the store's, from one complete read to the next (only the leader of
    /// the round in flight uses it, so the lock is never contended).
    clock_check: Mutex<StoreClockCheck>,
}

/// What a copy answered, and how.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CopyAnswer {
    /// The key's bits are all set.
    pub maybe: bool,
    /// Under the lease, after a barrier round, or "maybe" at once.
    pub via: FilterRead,
}

/// Who started a round.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RoundLeader {
    /// A lookup waiting for it (or the idle catch-up).
    Lookup,
    /// The background read that keeps the lease alive.
    Tail,
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
    /// The lookup leading the round went away before it ended: the copy is kept, the lookups
    /// that waited on the round ask the store.
    Abandoned,
}

/// Ends its round as abandoned if dropped before [`LeadingRound::end`]: a leader's future is
/// dropped when its client hangs up, and the lookups waiting on the round must not wait forever.
struct LeadingRound<'a> {
    copy: &'a HeldCopy,
    round: u64,
    ended: bool,
}

impl LeadingRound<'_> {
    fn end(mut self, end: &RoundEnd) {
        self.ended = true;
        self.copy.finish_round(self.round, end);
    }
}

impl Drop for LeadingRound<'_> {
    fn drop(&mut self) {
        if !self.ended {
            self.copy.finish_round(self.round, &RoundEnd::Abandoned);
        }
    }
}

impl HeldCopy {
    /// A copy of `meta`'s bits of `filter` in `store`, current to `position` of its journal.
    pub fn new(
        filter: &str,
        meta: Generation,
        bits: BloomFilter,
        position: JournalPosition,
        store: Arc<dyn CopySource>,
        metrics: Arc<Metrics>,
        clock: Arc<dyn Clock>,
    ) -> HeldCopy {
        HeldCopy {
            lease: meta.lease.filter(LeaseTerms::usable),
            lease_from: AtomicU64::new(0),
            closed: AtomicBool::new(false),
            lapse: tokio::sync::Notify::new(),
            clock_check: Mutex::new(StoreClockCheck::default()),
            clock,
            meta,
            filter: filter.to_owned(),
            store,
            metrics,
            bits,
            rounds: Mutex::default(),
            position: Mutex::new(position),
            finished: watch::Sender::new(0),
            failure: Mutex::default(),
            used: AtomicBool::new(false),
            last_used_ms: AtomicU64::new(0),
            last_round_ms: AtomicU64::new(0),
            created: Instant::now(),
        }
    }

    /// Bytes of bits held.
    pub fn bytes(&self) -> u64 {
        self.meta.params.total_bytes()
    }

    /// The copy's answer: "maybe" at once when the key's bits are all set; "no" at once while the
    /// lease holds; otherwise after a round that started after this call (leading it, if no other
    /// lookup has) made the copy current, or, under a lease, once a round already in flight has
    /// renewed it. Err: why it could not answer (None: the copy is stale or the round was
    /// abandoned: ask the store).
    pub async fn may_contain(&self, hash: &KeyHash) -> Result<CopyAnswer, Option<FilterUnavailable>> {
        if let Some(answer) = self.answer_at_once(hash) {
            return Ok(answer);
        }
        if self.closed.load(Ordering::Acquire) {
            return Err(None);
        }
        if self.lease.is_some() {
            self.metrics.leases.lapse();
            self.lapse.notify_one();
        }
        self.behind_barrier(hash).await
    }

    /// The answer the copy gives without waiting, if it can: what [`HeldCopy::may_contain`]
    /// answers first (synchronous, so a lookup can ask it without holding the copy).
    pub fn answer_at_once(&self, hash: &KeyHash) -> Option<CopyAnswer> {
        // Negative control (test builds only): no barrier, no lease.
        if crate::planted::active(crate::planted::Bug::SkipReadBarrier) {
            return Some(CopyAnswer { maybe: self.bits.may_contain_hash(hash), via: FilterRead::Barrier });
        }
        // Written only when it changes: lookups on every core read it, the tail clears it.
        if !self.used.load(Ordering::Relaxed) {
            self.used.store(true, Ordering::Relaxed);
        }
        if self.closed.load(Ordering::Acquire) {
            return None;
        }
        self.answer_from_memory(hash)
    }

    /// The answer the copy can give without a round: "maybe" when the key's bits are all set,
    /// "no" while the lease holds; None otherwise.
    fn answer_from_memory(&self, hash: &KeyHash) -> Option<CopyAnswer> {
        // Loaded before the bits are read: the entries of the read it names are in them.
        let lease_from = self.lease_from.load(Ordering::Acquire);
        if self.bits.may_contain_hash(hash) {
            return Some(CopyAnswer { maybe: true, via: FilterRead::CopyMaybe });
        }
        let terms = self.lease?;
        // Read after the lookup arrived, and after the bits: a pause only makes it later.
        let holds = lease_from != 0 && terms.holds(BootInstant::from_nanos(lease_from), self.clock.now());
        (holds && !self.closed.load(Ordering::Acquire)).then_some(CopyAnswer { maybe: false, via: FilterRead::Lease })
    }

    /// Waits for a round that started after this call (leading it, if no other lookup has),
    /// then answers from the copy if that round made it current; otherwise why it could not.
    /// Under a lease, every round that ends on the way may have renewed it: a round sent before
    /// this lookup arrived is as good as any other for a lease (see `crate::lease`).
    async fn behind_barrier(&self, hash: &KeyHash) -> Result<CopyAnswer, Option<FilterUnavailable>> {
        // Subscribed before the ticket: a round ending after the ticket is taken is then seen.
        let mut finished = self.finished.subscribe();
        let (ticket, in_flight) = {
            let mut rounds = self.lock_rounds();
            (rounds.ticket(), rounds.in_flight())
        };
        if !in_flight {
            // Let the lookups already runnable take this ticket too: they then share the round
            // this one is about to lead instead of each waiting for one of their own.
            tokio::task::yield_now().await;
        }
        loop {
            match self.lock_rounds().outcome(ticket) {
                Outcome::Pending => {}
                Outcome::Current => {
                    let maybe = self.bits.may_contain_hash(hash);
                    return Ok(CopyAnswer { maybe, via: FilterRead::Barrier });
                }
                Outcome::Failed => return Err(self.failure.lock().unwrap_or_else(|e| e.into_inner()).clone()),
            }
            let wanted = self.lock_rounds().start_wanted();
            match wanted {
                Some(round) => self.lead(round, RoundLeader::Lookup).await,
                None => {
                    if finished.changed().await.is_err() {
                        return Err(None);
                    }
                    if let Some(answer) = self.lease.and_then(|_| self.answer_from_memory(hash)) {
                        return Ok(answer);
                    }
                }
            }
        }
    }

    /// How long since a lookup last used the copy, as of the last time this was asked (the
    /// lookups only raise a flag; this turns it into a time).
    pub fn idle_for(&self) -> Duration {
        let now = self.now_ms();
        if self.used.swap(false, Ordering::Relaxed) {
            self.last_used_ms.store(now, Ordering::Relaxed);
        }
        Duration::from_millis(now.saturating_sub(self.last_used_ms.load(Ordering::Relaxed)))
    }

    /// How long since the last round ended (since the copy was made, if none has).
    pub fn since_last_round(&self) -> Duration {
        Duration::from_millis(self.now_ms().saturating_sub(self.last_round_ms.load(Ordering::Relaxed)))
    }

    /// Runs a round whether or not a lookup waits (the idle catch-up, which keeps the copy within
    /// the journal's retention), unless one is in flight.
    pub async fn catch_up_idle(&self) {
        let started = self.lock_rounds().start_any();
        if let Some(round) = started {
            self.lead(round, RoundLeader::Lookup).await;
        }
    }

    /// The background read that keeps the lease alive: a round, unless one is in flight.
    pub async fn tail(&self) {
        let started = self.lock_rounds().start_any();
        if let Some(round) = started {
            self.lead(round, RoundLeader::Tail).await;
        }
    }

    /// Resolves when a lookup finds the lease lapsed.
    pub async fn lapsed(&self) {
        self.lapse.notified().await;
    }

    /// Whether the copy answers under a lease (its generation was named with one).
    pub fn leased(&self) -> bool {
        self.lease.is_some()
    }

    /// Whether the copy was closed (it answers nothing any more).
    pub fn is_closed(&self) -> bool {
        self.lock_rounds().is_closed()
    }

    /// Runs round `round`, started by the caller, to its end; a stale copy is closed. A round
    /// that made the copy current renews the lease from when its first read was sent (its last
    /// read, which found the head, was sent later still).
    async fn lead(&self, round: u64, led: RoundLeader) {
        let leading = LeadingRound { copy: self, round, ended: false };
        let mut position = *self.position.lock().unwrap_or_else(|e| e.into_inner());
        let sent = self.clock.now();
        let mut store_time_us = None;
        let end = self.catch_up(&mut position, &mut store_time_us).await;
        // Entries applied by a round abandoned midway are applied again by the next: bits only
        // ever get set, so that is harmless, and the position never runs ahead of the bits.
        *self.position.lock().unwrap_or_else(|e| e.into_inner()) = position;
        let current = matches!(end, RoundEnd::Current);
        if current && self.clock_consistent(sent, store_time_us) {
            // Release: a lookup that loads it (Acquire) then reads bits holding every entry applied.
            self.lease_from.fetch_max(sent.as_nanos(), Ordering::Release);
        }
        if led == RoundLeader::Tail {
            self.metrics.leases.tail_read(current);
        }
        leading.end(&end);
        if let RoundEnd::Stale(why) = end {
            tracing::info!(
                filter = self.filter,
                generation = self.meta.generation,
                why,
                "local copy dropped; the next lookup loads it again"
            );
            self.close();
        }
    }

    /// Whether this origin's clock kept up with the store's since the previous complete read
    /// (see `lease::clock_check`); if not, the read that shows it renews no lease, and it is
    /// counted and logged.
    fn clock_consistent(&self, sent: BootInstant, store_time_us: Option<u64>) -> bool {
        let Some(terms) = self.lease else { return true };
        let received = self.clock.now();
        let verdict = self.clock_check.lock().unwrap_or_else(|e| e.into_inner()).observe(
            sent,
            received,
            store_time_us,
            terms.drift_ppm,
        );
        match verdict {
            ClockVerdict::Consistent => true,
            ClockVerdict::FellBehind(by_us) => {
                self.metrics.leases.clock_behind();
                tracing::warn!(
                    filter = self.filter,
                    behind_ms = by_us / 1_000,
                    "this origin's clock fell behind Redis's between two journal reads (a pause of the host it did not count, or a step of Redis's clock): the read renews no lease"
                );
                false
            }
        }
    }

    /// Ends round `round` as `end` says, and wakes the lookups waiting on it.
    fn finish_round(&self, round: u64, end: &RoundEnd) {
        // Only a store failure is the waiters' answer; otherwise they ask the store.
        let failure = match end {
            RoundEnd::Unavailable(e) => Some(e.clone()),
            RoundEnd::Current | RoundEnd::Stale(_) | RoundEnd::Abandoned => None,
        };
        // The failure is set before the round ends: a waiter reading "failed" reads its cause.
        *self.failure.lock().unwrap_or_else(|e| e.into_inner()) = failure;
        let current = matches!(end, RoundEnd::Current);
        self.lock_rounds().finish(round, current);
        self.last_round_ms.store(self.now_ms(), Ordering::Relaxed);
        self.finished.send_replace(round);
        self.metrics.copies.round(current);
    }

    /// No round runs again: every lookup waiting, or arriving later, is failed at once.
    pub fn close(&self) {
        self.closed.store(true, Ordering::Release);
        *self.failure.lock().unwrap_or_else(|e| e.into_inner()) = None;
        self.lock_rounds().close();
        self.finished.send_replace(u64::MAX);
    }

    /// Brings the copy from `position` up to the journal's head as read now, applying each entry's
    /// hashes; moves `position` along, and sets `store_time_us` to the store's clock at its last
    /// read.
    async fn catch_up(&self, position: &mut JournalPosition, store_time_us: &mut Option<u64>) -> RoundEnd {
        for _ in 0..MAX_READS_PER_ROUND {
            match self
                .store
                .catch_up_journal(
                    &self.filter,
                    self.meta,
                    JournalPage { after: *position, max_entries: ENTRIES_PER_READ },
                )
                .await
            {
                Ok(JournalRead::Entries { to, entries, head, store_time_us: read_at }) => {
                    *store_time_us = read_at;
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

    /// Whether a round is being run now.
    #[cfg(test)]
    pub fn round_in_flight(&self) -> bool {
        self.lock_rounds().in_flight()
    }

    /// The copy's answer as it stands, without the barrier: what a copy without one would say
    /// (the negative control of the tests).
    #[cfg(test)]
    pub fn may_contain_unguarded(&self, hash: &KeyHash) -> bool {
        self.bits.may_contain_hash(hash)
    }

    fn now_ms(&self) -> u64 {
        self.created.elapsed().as_millis() as u64
    }

    fn lock_rounds(&self) -> std::sync::MutexGuard<'_, Rounds> {
        self.rounds.lock().unwrap_or_else(|e| e.into_inner())
    }
}
