//! Fixed-rate request tickets with sub-millisecond release.
//!
//! Request `i` of a run at rate `r` is due at `start + i / r`, and its latency counts from then
//! (coordinated omission). Tokio's timer has a 1 ms tick: a connection sleeping until its own due
//! time woke 0-2 ms late, so every request of a tick was released in one burst and the load
//! generator's own lateness (p50 ≈ 1.4 ms at half rate) swamped the ~0.1 ms a server adds.
//! Here one OS thread releases the tickets that have come due every ~50 µs, and any idle
//! connection takes the earliest: arrivals at a fixed rate served by a pool of connections,
//! as a proxy in front of the server would send them.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;

/// How often the pacing thread releases the tickets that came due (the kernel's timer slack
/// adds ~50 µs to each sleep).
const RELEASE_EVERY: Duration = Duration::from_micros(50);

/// Hands out tickets at a fixed rate to the connections of one run.
pub struct Pacer {
    start: Instant,
    rate: f64,
    /// Tickets in the run; taking one past them means the run is over.
    tickets: u64,
    released: Semaphore,
    taken: AtomicU64,
    stopped: AtomicBool,
}

/// What a connection gets from [`Pacer::next`].
#[derive(Debug, PartialEq, Eq)]
pub enum Ticket {
    /// Send a request.
    Send {
        /// When it fell due: its latency counts from then.
        due: Instant,
    },
    /// Every ticket of the run has been taken: the connection is done.
    Done,
}

impl Pacer {
    /// A run of `tickets` requests at `rate` per second from `start`. Nothing is released
    /// until [`Pacer::run`] is called (on a thread of its own).
    pub fn new(start: Instant, rate: f64, tickets: u64) -> Arc<Pacer> {
        assert!(rate > 0.0, "a fixed rate above 0");
        Arc::new(Pacer {
            start,
            rate,
            tickets,
            released: Semaphore::new(0),
            taken: AtomicU64::new(0),
            stopped: AtomicBool::new(false),
        })
    }

    /// The tickets a run of `duration` at `rate` holds (every one due before its end).
    pub fn tickets_in(duration: Duration, rate: f64) -> u64 {
        (duration.as_secs_f64() * rate).ceil() as u64
    }

    /// When ticket `i` is due.
    pub fn due(&self, i: u64) -> Instant {
        self.start + Duration::from_secs_f64(i as f64 / self.rate)
    }

    /// Tickets due at or before `now`.
    pub fn due_by(&self, now: Instant) -> u64 {
        match now.checked_duration_since(self.start) {
            Some(elapsed) => ((elapsed.as_secs_f64() * self.rate).floor() as u64 + 1).min(self.tickets),
            None => 0,
        }
    }

    /// Releases tickets as they come due until all are out, then one "done" per connection.
    /// Blocks: run it on its own thread.
    pub fn run(&self, connections: usize) {
        let mut out = 0;
        while out < self.tickets && !self.stopped.load(Ordering::Relaxed) {
            let due = self.due_by(Instant::now());
            if due > out {
                self.released.add_permits((due - out) as usize);
                out = due;
            }
            std::thread::sleep(RELEASE_EVERY);
        }
        self.released.add_permits(connections);
    }

    /// Stops releasing: the connections are told they are done (for a run abandoned early).
    pub fn stop(&self) {
        self.stopped.store(true, Ordering::Relaxed);
    }

    /// Waits for the next ticket. Tickets are taken in order, so whoever is idle first sends
    /// the request that has waited longest.
    pub async fn next(&self) -> Ticket {
        match self.released.acquire().await {
            Ok(permit) => permit.forget(),
            Err(_) => return Ticket::Done,
        }
        let i = self.taken.fetch_add(1, Ordering::Relaxed);
        match i < self.tickets && !self.stopped.load(Ordering::Relaxed) {
            true => Ticket::Send { due: self.due(i) },
            false => Ticket::Done,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tickets_fall_due_one_interval_apart_from_the_start() {
        let start = Instant::now();
        let pacer = Pacer::new(start, 1000.0, 10);
        assert_eq!(pacer.due(0), start);
        assert_eq!(pacer.due(3), start + Duration::from_millis(3));
        assert_eq!(pacer.due_by(start), 1, "ticket 0 is due at the start");
        assert_eq!(pacer.due_by(start + Duration::from_micros(2500)), 3);
        assert_eq!(pacer.due_by(start + Duration::from_secs(60)), 10, "never more than the run holds");
        if let Some(before) = start.checked_sub(Duration::from_millis(1)) {
            assert_eq!(pacer.due_by(before), 0);
        }
    }

    #[test]
    fn a_run_holds_every_ticket_due_before_its_end() {
        assert_eq!(Pacer::tickets_in(Duration::from_secs(10), 1000.0), 10_000);
        assert_eq!(Pacer::tickets_in(Duration::from_millis(1500), 3.0), 5, "due at 0, ⅓, ⅔, 1, 1⅓ s");
    }

    #[tokio::test]
    async fn every_ticket_is_taken_once_in_order_then_each_connection_is_done() {
        // At a rate this high every ticket is due at once: the test does not wait on the clock.
        let pacer = Pacer::new(Instant::now(), 1e9, 50);
        let runner = pacer.clone();
        let thread = std::thread::spawn(move || runner.run(3));
        let mut dues = Vec::new();
        while let Ticket::Send { due } = pacer.next().await {
            dues.push(due);
        }
        assert_eq!(dues.len(), 50);
        assert!(dues.windows(2).all(|w| w[0] <= w[1]), "taken in order of due time");
        assert_eq!(pacer.next().await, Ticket::Done, "the other two connections are told too");
        assert_eq!(pacer.next().await, Ticket::Done);
        thread.join().expect("pacer thread");
    }

    #[tokio::test]
    async fn a_stopped_pacer_tells_every_connection_it_is_done() {
        let pacer = Pacer::new(Instant::now(), 1.0, 1_000_000);
        pacer.stop();
        let runner = pacer.clone();
        std::thread::spawn(move || runner.run(2)).join().expect("pacer thread");
        assert_eq!(pacer.next().await, Ticket::Done);
        assert_eq!(pacer.next().await, Ticket::Done);
    }
}
