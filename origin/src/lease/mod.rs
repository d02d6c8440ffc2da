//! Read leases: a local copy answers "no" from memory, without a Redis round trip, while its
//! lease holds; a writer acknowledges an add only once every lease that could have missed it
//! has run out. Writers wait, readers don't (writes are rare next to reads).
//!
//! # Terms
//!
//! A generation named in `lease` mode records its [`LeaseTerms`] (L and ρ) in its `Generation`,
//! so every origin reads and writes it under the same terms, whatever its own settings or
//! version; a generation recorded without terms (named in `barrier` mode, or before leases
//! existed) is read behind the read barrier alone (`local_copy::rounds`).
//!
//! - A copy's *lease* is the instant `s`, on the reader's [`boot_clock::BootClock`], at which the newest
//!   *complete* read of its journal was **sent**: a read that reached the journal's head, after
//!   which every entry it returned was applied to the copy's bits before `s` was published.
//! - **Reader.** A lookup of a key whose bits are not all set answers "no" from the copy iff
//!   `now − s ≤ L`, where `s` was loaded before the bits were read and `now` read after the lookup
//!   arrived ([`LeaseTerms::holds`]). Otherwise it waits for a barrier round, which also renews the
//!   lease. A key whose bits are all set is "maybe" at once: bits only get set.
//! - **Writer.** An add is acknowledged only once `W = L·(1+ρ)/(1−ρ)` has passed on the writer's
//!   clock since the add's answer arrived, for the terms of every generation named in the states
//!   the write read, stale ones included ([`WriteDeadline`]); the wait overlaps the database write.
//!
//! # Assumptions
//!
//! 1. Every origin's boot clock runs at a rate within `1 ± ρ` of real time (ρ = 10⁻³ by default;
//!    NTP slews at most 5·10⁻⁴), and counts every pause of the process: SIGSTOP, cgroup
//!    freezes and suspends done by the guest's own kernel do count (`CLOCK_BOOTTIME`). A virtual
//!    machine paused or live-migrated by its hypervisor does not: every guest clock stops for
//!    the pause. [`clock_check`] catches such a pause at the next journal read (Redis's clock ran
//!    on) and renews no lease from a read that spans it, but lookups between the pause's end and
//!    that read still answer under the lease from before; on hosts that pause guests, use
//!    `barrier`. No clocks are compared across machines for correctness: each origin only
//!    subtracts two readings of its own clock.
//! 2. Journals are read from the Redis process that took the adds: a restarted, rolled back or
//!    failed-over Redis is another incarnation, and every read names the incarnation it expects
//!    (a call to another process is refused, `store::redis`).
//! 3. Redis answers a read that reaches it after an append answered with the append in it (one
//!    primary per key, commands in order).
//!
//! # Why a lookup after an acknowledgement sees the add
//!
//! Take the generation G a reader holds, and an add to G whose answer reached the writer at real
//! time `t_r` (its journal entry was appended before Redis answered). The writer acknowledges at
//! `t_ack`: W on a clock running at most `1 + ρ` fast is at least `W/(1+ρ) = L/(1−ρ)` real, so
//! `t_ack ≥ t_r + L/(1−ρ)`. A lookup arriving at `t_a ≥ t_ack` checks at `t_c ≥ t_a`, and its
//! lease holds: at most L passed on a clock running at least `1 − ρ` fast, at most `L/(1−ρ)`
//! real, so the read was sent at `t_s ≥ t_c − L/(1−ρ) ≥ t_r`. Sent after the add's answer
//! arrived, it reached Redis after the append (assumption 3); it reached the head, so the entry
//! was among those applied before `s` was published, and the bits were read after that. The
//! key's bits are set: the answer is "maybe", never "no".
//!
//! Pauses do not break this. A reader paused before it reads its clock only gets a later `now`
//! (the lease lapses sooner); one paused after its check answers as of the check, which came after
//! the lookup arrived. A read counts from when it was *sent*, so a reply slower than L never
//! yields a lease that holds. Generations with other terms: the writer waits the longest W of
//! every generation it read named; the reader uses its own generation's.
//!
//! # Why a reader's generation never missed an acknowledged add
//!
//! A write adds to every generation named (and current) in the states it reads (`gate`). It can
//! skip a generation G a reader still holds only when G was not named for it:
//!
//! - **Unnamed** (the previous one retired after a switch, a rebuild's leftover or abandoned
//!   generation, every generation of a dropped filter): G is *retired* first (its journal becomes
//!   a `retired` marker, which a read reports as stale, never as complete), then G's lease is
//!   waited out ([`wait_out`]: W of G's terms, from when the retirement answered), and only then
//!   does the state stop naming G. A write that skipped G read the state after that, so
//!   `t_ack > t_ret + L/(1−ρ)`, and a lease of G holding at `t_c ≥ t_ack` was sent after the
//!   retirement: it was not complete. No lease of G holds; the copy's next read drops it.
//! - **Another incarnation** (Redis restarted, rolled back to a snapshot, a replica promoted),
//!   still named but stale: the write read the state from the new process, after the change, and
//!   waits out G's terms too (stale generations count). A lease holding after the
//!   acknowledgement was sent after the change and refused by the incarnation check.
//! - **The state lost** (flushed, evicted): nobody knows what it named or on which terms. Before
//!   a rebuild names a new generation in a new state it deletes every generation's keys (a read
//!   of a missing journal is not complete: an empty `XRANGE` of a missing stream is told from
//!   "nothing new" by the stream's length, `store::redis`), then waits out the longest lease any
//!   generation may record ([`MAX_WRITER_WAIT`]); a drop that finds no state does the same before
//!   its tombstone.
//! - **Not named yet** (a rebuild's new generation): no copy of it exists before it is active,
//!   and its bits hold every key acknowledged before it was named (`rebuild`).
//!
//! A journal trimmed past a copy's position is reported as such (`JournalRead::Reset`): the copy
//! is dropped and loaded again.

pub mod boot_clock;
pub mod clock_check;

use boot_clock::{BootInstant, Clock};
use serde::{Deserialize, Serialize};
use std::time::Duration;

pub use bloomgate_client::api::ReadConsistency;

/// h by default: how often a copy in use reads its journal in the background. With L = 10 ms a
/// lease is then at most ~4 ms plus a round trip old when a lookup looks, and a busy origin reads
/// each held filter's journal 250 times a second.
pub const DEFAULT_TAIL_EVERY: Duration = Duration::from_millis(4);

/// The longest lease a generation may record: what a rebuild after a lost state waits out.
pub const MAX_LEASE: Duration = Duration::from_secs(1);

/// The largest clock-rate bound a generation may record, in parts per million (10 %).
pub const MAX_DRIFT_PPM: u32 = 100_000;

/// W of the longest lease at the largest drift: waited out when the terms of the generations
/// that may be read are not known (the filter state was lost).
pub const MAX_WRITER_WAIT: Duration = Duration::from_nanos(
    (MAX_LEASE.as_nanos() as u64 * (1_000_000 + MAX_DRIFT_PPM as u64)).div_ceil(1_000_000 - MAX_DRIFT_PPM as u64),
);

/// A generation's lease, recorded when it is named (see the module doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct LeaseTerms {
    /// L, in microseconds.
    pub lease_us: u64,
    /// ρ, the bound on every clock's rate error, in parts per million.
    pub drift_ppm: u32,
}

impl LeaseTerms {
    /// Terms of `lease` under a rate bound of `drift_ppm`.
    pub fn new(lease: Duration, drift_ppm: u32) -> LeaseTerms {
        LeaseTerms { lease_us: u64::try_from(lease.as_micros()).unwrap_or(u64::MAX), drift_ppm }
    }

    /// L.
    pub fn lease(&self) -> Duration {
        Duration::from_micros(self.lease_us)
    }

    /// Whether these terms can be honoured: L and ρ within the bounds every origin checks. Terms
    /// out of bounds (a damaged record) are neither waited out nor read under: the generation is
    /// read behind the barrier, as one without terms.
    pub fn usable(&self) -> bool {
        self.lease() <= MAX_LEASE && self.drift_ppm <= MAX_DRIFT_PPM
    }

    /// W = L·(1+ρ)/(1−ρ), rounded up to the nanosecond: how long a writer waits after its add
    /// answered.
    pub fn writer_wait(&self) -> Duration {
        let lease_ns = u128::from(self.lease_us) * 1_000;
        let ppm = u128::from(self.drift_ppm.min(MAX_DRIFT_PPM));
        let ns = (lease_ns * (1_000_000 + ppm)).div_ceil(1_000_000 - ppm);
        Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX))
    }

    /// Whether a lease from a complete read sent at `sent` holds at `now` (both on the reader's
    /// clock; `now` read after the lookup arrived).
    pub fn holds(&self, sent: BootInstant, now: BootInstant) -> bool {
        now >= sent && now.saturating_since(sent) <= self.lease()
    }
}

/// What an origin records in the generations it names: its terms in `lease` mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaseSettings {
    /// The mode of filters created here without one, and of generations named for a filter
    /// whose state records none.
    pub default_mode: ReadConsistency,
    /// The terms recorded in `lease` mode; None exactly when the filter store is in process,
    /// where no other origin holds a copy: every generation is then named without a lease.
    pub terms: Option<LeaseTerms>,
}

impl LeaseSettings {
    /// No leases at all.
    pub const OFF: LeaseSettings = LeaseSettings { default_mode: ReadConsistency::Barrier, terms: None };

    /// The terms a generation of a filter in `mode` (None: this origin's default) is named with.
    pub fn terms_for(&self, mode: Option<ReadConsistency>) -> Option<LeaseTerms> {
        match mode.unwrap_or(self.default_mode) {
            ReadConsistency::Lease => self.terms,
            ReadConsistency::Barrier => None,
        }
    }

    /// What to wait out when the generations that may be read are not known (the filter state
    /// was lost): the longest W any generation may record, unless no origin can hold a copy.
    pub fn unknown_terms_wait(&self) -> Duration {
        match self.terms {
            Some(_) => MAX_WRITER_WAIT,
            None => Duration::ZERO,
        }
    }
}

/// When a write may be acknowledged: the latest of every add's answer plus the W of the terms
/// the write must wait out (see the module doc). Batch writes wait once.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WriteDeadline {
    at: Option<BootInstant>,
}

impl WriteDeadline {
    /// An add answered at `answered`; `terms` are those to wait out from then (every generation
    /// the write's state reads named, stale ones included; None or unusable ones wait nothing).
    pub fn add_answered(&mut self, answered: BootInstant, terms: impl IntoIterator<Item = Option<LeaseTerms>>) {
        let wait = terms.into_iter().flatten().filter(LeaseTerms::usable).map(|t| t.writer_wait()).max();
        if let Some(wait) = wait {
            self.at = self.at.max(Some(answered.plus(wait)));
        }
    }

    /// The instant the write may be acknowledged from; None: at once.
    pub fn at(&self) -> Option<BootInstant> {
        self.at
    }

    /// Whether the deadline is still ahead at `now` (the write will wait).
    pub fn ahead_of(&self, now: BootInstant) -> bool {
        self.at.is_some_and(|at| at > now)
    }
}

/// Waits out the leases of `retired` generations, whose retirement answered at `retired_at`:
/// call between retiring generations and the state change that stops naming them.
pub async fn wait_out(
    clock: &dyn Clock,
    retired_at: BootInstant,
    retired: impl IntoIterator<Item = Option<LeaseTerms>>,
) {
    let mut deadline = WriteDeadline::default();
    deadline.add_answered(retired_at, retired);
    if let Some(at) = deadline.at() {
        boot_clock::sleep_until(clock, at).await;
    }
}

#[cfg(test)]
mod tests;
