//! The read barrier's bookkeeping, kept pure: which catch-up round a lookup must wait for, and
//! what that round's end means for it.
//!
//! A lookup that arrives takes a *ticket*: the number of the next round to start. Rounds are
//! numbered in the order they start, and a round starts (its journal read is sent) only after
//! every ticket naming it was handed out. So when round `t` has read the journal's head and
//! applied everything up to it, every add acknowledged before a ticket-`t` lookup arrived is in
//! the copy: the add's journal entry was appended before its acknowledgement, hence before the
//! lookup arrived, hence before round `t` read the head. Rounds after `t` started later still,
//! and the copy only ever gains bits, so any of them that succeeded serves the lookup too.
//!
//! Many lookups share one ticket: at most one round is in flight, and every lookup arriving
//! meanwhile waits for the one after it. That is the amortisation: one journal read per round
//! trip, however many lookups arrive during it.

/// Rounds of one local copy.
#[derive(Debug, Default)]
pub struct Rounds {
    /// Rounds started so far (the last one's number).
    started: u64,
    /// The newest round that has ended.
    finished: u64,
    /// The newest round that ended with the copy current to the journal's head.
    last_current: u64,
    /// A round is being run now.
    in_flight: bool,
    /// A lookup waits for a round not started yet.
    wanted: bool,
    /// No round starts again.
    closed: bool,
}

/// What a lookup holding a ticket may do now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Its round has not ended yet: wait.
    Pending,
    /// A round that started after it arrived made the copy current: answer from the copy.
    Current,
    /// Its round ended without making the copy current: the copy must not answer it.
    Failed,
}

impl Rounds {
    /// A ticket for a lookup arriving now: the next round to start, which is marked wanted.
    pub fn ticket(&mut self) -> u64 {
        self.wanted = true;
        self.started + 1
    }

    /// Starts the next round if a lookup waits for it and none is in flight; its number.
    pub fn start_wanted(&mut self) -> Option<u64> {
        (self.wanted && !self.in_flight && !self.closed).then(|| self.start())
    }

    /// Starts the next round whether or not a lookup waits (the idle catch-up, which keeps the
    /// copy within the journal's retention); None if one is in flight.
    pub fn start_any(&mut self) -> Option<u64> {
        (!self.in_flight && !self.closed).then(|| self.start())
    }

    fn start(&mut self) -> u64 {
        self.wanted = false;
        self.in_flight = true;
        self.started += 1;
        self.started
    }

    /// Round `round` ended; `current` says whether it brought the copy up to the head it read.
    pub fn finish(&mut self, round: u64, current: bool) {
        debug_assert!(self.in_flight && round == self.started, "rounds end in the order they start");
        self.in_flight = false;
        self.finished = round;
        if current {
            self.last_current = round;
        }
    }

    /// What the holder of `ticket` may do now.
    pub fn outcome(&self, ticket: u64) -> Outcome {
        if self.last_current >= ticket {
            Outcome::Current
        } else if self.closed {
            Outcome::Failed
        } else if self.finished < ticket {
            Outcome::Pending
        } else {
            Outcome::Failed
        }
    }

    /// Whether a lookup waits for a round not started yet.
    pub fn is_wanted(&self) -> bool {
        self.wanted
    }

    /// Whether a round is being run now.
    pub fn in_flight(&self) -> bool {
        self.in_flight
    }

    /// Whether the rounds were closed.
    pub fn is_closed(&self) -> bool {
        self.closed
    }

    /// No round will run again (the copy is dropped): every ticket not yet served, and every
    /// ticket handed out from now on, is failed at once instead of waiting for ever.
    pub fn close(&mut self) {
        self.closed = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lookup_waits_for_a_round_that_starts_after_it_arrives() {
        let mut rounds = Rounds::default();
        let early = rounds.ticket();
        let first = rounds.start_wanted().unwrap();
        assert_eq!(first, early);
        // Arrives while the first round is in flight: the first round's head may predate it.
        let late = rounds.ticket();
        assert_eq!(rounds.start_wanted(), None, "one round in flight at a time");
        rounds.finish(first, true);
        assert_eq!(rounds.outcome(early), Outcome::Current);
        assert_eq!(
            rounds.outcome(late),
            Outcome::Pending,
            "the round that was in flight when it arrived is not enough"
        );
        let second = rounds.start_wanted().unwrap();
        assert_eq!(second, late);
        rounds.finish(second, true);
        assert_eq!(rounds.outcome(late), Outcome::Current);
    }

    #[test]
    fn lookups_arriving_together_share_one_round() {
        let mut rounds = Rounds::default();
        let tickets: Vec<u64> = (0..100).map(|_| rounds.ticket()).collect();
        let round = rounds.start_wanted().unwrap();
        rounds.finish(round, true);
        assert!(tickets.iter().all(|t| rounds.outcome(*t) == Outcome::Current));
        assert_eq!(rounds.start_wanted(), None, "nobody waits: no round");
    }

    #[test]
    fn a_failed_round_fails_the_lookups_waiting_for_it() {
        let mut rounds = Rounds::default();
        let first_ticket = rounds.ticket();
        let first = rounds.start_wanted().unwrap();
        rounds.finish(first, false);
        assert_eq!(rounds.outcome(first_ticket), Outcome::Failed);
        let second_ticket = rounds.ticket();
        let second = rounds.start_wanted().unwrap();
        rounds.finish(second, true);
        assert_eq!(rounds.outcome(second_ticket), Outcome::Current);
        // Round 2 also started after the first lookup arrived: sound for it too (a lookup that
        // already saw "failed" has gone to the store by then).
        assert_eq!(rounds.outcome(first_ticket), Outcome::Current);
    }

    #[test]
    fn an_idle_round_serves_lookups_that_arrived_before_it_started() {
        let mut rounds = Rounds::default();
        let ticket = rounds.ticket();
        let idle = rounds.start_any().unwrap();
        assert!(!rounds.is_wanted(), "the idle round covers the waiting lookup");
        rounds.finish(idle, true);
        assert_eq!(rounds.outcome(ticket), Outcome::Current);
        // A round already in flight is never doubled.
        let in_flight = rounds.start_any().unwrap();
        assert_eq!(rounds.start_any(), None);
        rounds.finish(in_flight, false);
    }

    #[test]
    fn a_closed_copy_fails_every_waiting_and_later_lookup() {
        let mut rounds = Rounds::default();
        let served = rounds.ticket();
        let round = rounds.start_wanted().unwrap();
        rounds.finish(round, true);
        let waiting = rounds.ticket();
        rounds.close();
        assert_eq!(rounds.outcome(served), Outcome::Current, "what was served stays served");
        assert_eq!(rounds.outcome(waiting), Outcome::Failed);
        let later = rounds.ticket();
        assert_eq!(rounds.outcome(later), Outcome::Failed);
        assert_eq!((rounds.start_wanted(), rounds.start_any()), (None, None), "no round starts again");
    }
}
