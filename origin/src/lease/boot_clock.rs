//! The clock read leases are timed on: Linux's `CLOCK_BOOTTIME`, which keeps counting while
//! the machine (or the VM it runs in) is suspended.
//!
//! `std::time::Instant` is `CLOCK_MONOTONIC` on Linux, which stops during a suspend: a reader
//! suspended for a minute would wake with a lease that looks a few ms old and answer "no" from a
//! copy a minute stale. A lease is only as safe as the clock's *rate* (see [`super`]), and a
//! clock that stops has no rate bound at all. Elsewhere (not Linux) the fallback is the platform's
//! monotonic clock, which the design does not vouch for; production runs on Linux.

use std::time::Duration;

/// An instant on the boot clock: nanoseconds since the machine booted. Only differences
/// between two instants of one process mean anything.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BootInstant(u64);

impl BootInstant {
    /// The instant `nanos` after boot.
    pub const fn from_nanos(nanos: u64) -> BootInstant {
        BootInstant(nanos)
    }

    /// Nanoseconds since boot.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// How long after `earlier` this is; zero if it is not after it.
    pub fn saturating_since(self, earlier: BootInstant) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }

    /// This instant plus `d` (saturating: an instant ~584 years after boot stands for "never").
    pub fn plus(self, d: Duration) -> BootInstant {
        BootInstant(self.0.saturating_add(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)))
    }
}

/// Where an instant comes from: the boot clock in production, a hand-moved one in tests.
pub trait Clock: Send + Sync + 'static {
    /// The instant now, on this clock.
    fn now(&self) -> BootInstant;
}

/// `CLOCK_BOOTTIME`.
#[derive(Clone, Copy, Debug, Default)]
pub struct BootClock;

impl Clock for BootClock {
    #[cfg(target_os = "linux")]
    fn now(&self) -> BootInstant {
        // Through the vDSO: no system call, tens of ns.
        let t = rustix::time::clock_gettime(rustix::time::ClockId::Boottime);
        let nanos = u64::try_from(t.tv_sec).unwrap_or(0) * 1_000_000_000 + u64::try_from(t.tv_nsec).unwrap_or(0);
        BootInstant(nanos)
    }

    #[cfg(not(target_os = "linux"))]
    fn now(&self) -> BootInstant {
        static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
        let start = *START.get_or_init(std::time::Instant::now);
        BootInstant(u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX))
    }
}

/// A clock moved by hand, for tests of what a lease does as time passes.
#[cfg(test)]
#[derive(Debug, Default)]
pub struct ManualClock(std::sync::atomic::AtomicU64);

#[cfg(test)]
impl ManualClock {
    /// A clock at `start`.
    pub fn at(start: BootInstant) -> ManualClock {
        ManualClock(std::sync::atomic::AtomicU64::new(start.as_nanos()))
    }

    /// Moves it on by `d`.
    pub fn advance(&self, d: Duration) {
        self.0.fetch_add(d.as_nanos() as u64, std::sync::atomic::Ordering::SeqCst);
    }
}

#[cfg(test)]
impl Clock for ManualClock {
    fn now(&self) -> BootInstant {
        BootInstant(self.0.load(std::sync::atomic::Ordering::SeqCst))
    }
}

/// Sleeps until `clock` reads `deadline` or later. Timers run on the monotonic clock, so this
/// re-reads the boot clock after each sleep: a suspend in between only ends it sooner.
pub async fn sleep_until(clock: &dyn Clock, deadline: BootInstant) {
    loop {
        let left = deadline.saturating_since(clock.now());
        if left.is_zero() {
            return;
        }
        tokio::time::sleep(left).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_boot_clock_moves_forward_with_real_time() {
        let clock = BootClock;
        let (a, started) = (clock.now(), std::time::Instant::now());
        std::thread::sleep(Duration::from_millis(20));
        let (b, elapsed) = (clock.now(), started.elapsed());
        let moved = b.saturating_since(a);
        assert!(moved >= Duration::from_millis(20), "{moved:?}");
        // Both clocks tick at the same rate while the machine runs.
        assert!(moved <= elapsed + Duration::from_millis(5), "{moved:?} against {elapsed:?}");
        assert_eq!(a.saturating_since(b), Duration::ZERO);
    }

    #[tokio::test]
    async fn sleep_until_ends_at_the_deadline_on_the_boot_clock() {
        let clock = BootClock;
        let deadline = clock.now().plus(Duration::from_millis(15));
        sleep_until(&clock, deadline).await;
        assert!(clock.now() >= deadline);
        let past = clock.now();
        sleep_until(&clock, past).await;
    }
}
