//! The lookups' in-flight cap as one atomic counter: entering is one compare-and-swap (a few
//! under contention), leaving one subtraction. A lookup is refused at once at the cap and never
//! waits, so it needs none of a semaphore's queue; tokio's takes its waiters' lock on every
//! release, which every "no" paid. The cap is exact: an entry that would pass it is not made.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Requests in flight under a cap, by weight.
#[derive(Debug)]
pub struct InFlight {
    held: AtomicUsize,
    cap: usize,
}

impl InFlight {
    /// At most `cap` in flight, by weight.
    pub fn new(cap: usize) -> InFlight {
        InFlight { held: AtomicUsize::new(0), cap }
    }

    fn try_add(&self, weight: usize) -> bool {
        self.held
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| {
                held.checked_add(weight).filter(|after| *after <= self.cap)
            })
            .is_ok()
    }

    /// Enters with `weight`, or None at the cap; left when the entry is dropped.
    pub fn enter(&self, weight: usize) -> Option<Entered<'_>> {
        self.try_add(weight).then(|| Entered { of: self, weight })
    }

    /// [`enter`](Self::enter), for an entry that outlives the borrow (a layer's future).
    pub fn enter_owned(self: &Arc<Self>, weight: usize) -> Option<EnteredOwned> {
        self.try_add(weight).then(|| EnteredOwned { of: self.clone(), weight })
    }

    /// What is in flight now, by weight.
    pub fn held(&self) -> usize {
        self.held.load(Ordering::Acquire)
    }
}

/// A request in flight: leaves when dropped.
#[derive(Debug)]
pub struct Entered<'a> {
    of: &'a InFlight,
    weight: usize,
}

impl Drop for Entered<'_> {
    fn drop(&mut self) {
        self.of.held.fetch_sub(self.weight, Ordering::Release);
    }
}

/// A request in flight, owning its counter's handle: leaves when dropped.
#[derive(Debug)]
pub struct EnteredOwned {
    of: Arc<InFlight>,
    weight: usize,
}

impl Drop for EnteredOwned {
    fn drop(&mut self) {
        self.of.held.fetch_sub(self.weight, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_stop_at_the_cap_and_leave_when_dropped() {
        let gate = Arc::new(InFlight::new(3));
        let a = gate.enter(2).unwrap();
        assert!(gate.enter(2).is_none(), "2 + 2 is past 3");
        let b = gate.enter_owned(1).unwrap();
        assert!(gate.enter(1).is_none() && gate.held() == 3);
        drop(a);
        assert_eq!(gate.held(), 1);
        assert!(gate.enter(2).is_some(), "room again (and left at once: dropped)");
        drop(b);
        assert_eq!(gate.held(), 0);
        assert!(InFlight::new(0).enter(1).is_none(), "a cap of 0 admits nothing");
        assert!(gate.enter(usize::MAX).is_none(), "no overflow");
    }

    #[test]
    fn threads_racing_never_hold_more_than_the_cap() {
        let gate = Arc::new(InFlight::new(4));
        let most = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let (gate, most) = (gate.clone(), most.clone());
                std::thread::spawn(move || {
                    let mut admitted = 0;
                    for _ in 0..20_000 {
                        if let Some(_entry) = gate.enter(1) {
                            most.fetch_max(gate.held(), Ordering::Relaxed);
                            admitted += 1;
                        }
                    }
                    admitted
                })
            })
            .collect();
        let admitted: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
        assert!(most.load(Ordering::Relaxed) <= 4, "held {} at most", most.load(Ordering::Relaxed));
        assert!(admitted > 0 && gate.held() == 0, "{admitted} admitted, all left");
    }
}
