//! Trying a request again: how many attempts, how long to wait in all, and the wait before
//! each retry, which is never shorter than what the server asked for with `Retry-After`.

use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

/// When and how often a client sends a request again (see
/// [`Client::with_retries`](crate::Client::with_retries)).
///
/// A request is tried again after an answer of 429 or 5xx, no connection, a timeout or a
/// connection that broke ([`Error::is_retryable`](crate::Error::is_retryable)). The wait before
/// a retry doubles from the first backoff up to the longest, with jitter when on, and is never
/// shorter than the server's `Retry-After`. When the next wait would take the waiting past
/// [`total_wait`](Self::total_wait), the client stops and returns the last error (which carries
/// the `Retry-After` it was given) instead of waiting less than the server asked.
///
/// Defaults: 5 attempts, 30 s of waiting in all, backoff from 200 ms up to 5 s, jitter on.
#[derive(Clone, Debug, PartialEq)]
pub struct RetryPolicy {
    attempts: u32,
    total_wait: Duration,
    first_backoff: Duration,
    max_backoff: Duration,
    jitter: bool,
}

impl Default for RetryPolicy {
    fn default() -> RetryPolicy {
        RetryPolicy {
            attempts: 5,
            total_wait: Duration::from_secs(30),
            first_backoff: Duration::from_millis(200),
            max_backoff: Duration::from_secs(5),
            jitter: true,
        }
    }
}

impl RetryPolicy {
    /// The policy with at most `attempts` tries of each request, the first included (at least 1;
    /// 1 means no retry).
    pub fn attempts(mut self, attempts: u32) -> RetryPolicy {
        self.attempts = attempts.max(1);
        self
    }

    /// The policy with at most `total` of waiting between the tries of one request.
    pub fn total_wait(mut self, total: Duration) -> RetryPolicy {
        self.total_wait = total;
        self
    }

    /// The policy with a backoff that starts at `first` and doubles up to `max` (when the server
    /// names no longer wait).
    pub fn backoff(mut self, first: Duration, max: Duration) -> RetryPolicy {
        self.first_backoff = first;
        self.max_backoff = max.max(first);
        self
    }

    /// The policy with jitter on or off. On, a backoff is drawn between half of it and all of
    /// it, so clients refused together do not come back together; a `Retry-After` is kept.
    pub fn jitter(mut self, on: bool) -> RetryPolicy {
        self.jitter = on;
        self
    }

    /// The wait before try `next` (2 for the first retry) after a retryable failure whose
    /// server asked for `retry_after`, having waited `waited` so far; None to give up.
    pub(crate) fn wait_before(&self, next: u32, retry_after: Option<Duration>, waited: Duration) -> Option<Duration> {
        if next > self.attempts {
            return None;
        }
        let doublings = next.saturating_sub(2).min(31);
        let backoff = self.first_backoff.saturating_mul(1 << doublings).min(self.max_backoff);
        let backoff = match self.jitter {
            true => backoff.mul_f64(0.5 + 0.5 * random_fraction()),
            false => backoff,
        };
        let wait = backoff.max(retry_after.unwrap_or_default());
        (waited + wait <= self.total_wait).then_some(wait)
    }
}

/// A number in [0, 1) that differs from call to call (std's randomly keyed hasher; jitter
/// needs no more).
fn random_fraction() -> f64 {
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(0);
    (hasher.finish() >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn plain() -> RetryPolicy {
        RetryPolicy::default().jitter(false).backoff(100 * MS, 400 * MS).total_wait(Duration::from_secs(10))
    }

    #[test]
    fn the_backoff_doubles_up_to_its_longest() {
        let waits: Vec<_> = (2..=6).map(|next| plain().attempts(9).wait_before(next, None, Duration::ZERO)).collect();
        assert_eq!(waits, [Some(100 * MS), Some(200 * MS), Some(400 * MS), Some(400 * MS), Some(400 * MS)]);
    }

    #[test]
    fn retry_after_is_waited_in_full_never_less() {
        let asked = Some(Duration::from_secs(2));
        assert_eq!(plain().wait_before(2, asked, Duration::ZERO), Some(Duration::from_secs(2)));
        assert_eq!(plain().wait_before(2, Some(10 * MS), Duration::ZERO), Some(100 * MS), "the backoff is longer");
    }

    #[test]
    fn attempts_and_the_total_wait_are_bounds() {
        assert_eq!(plain().attempts(3).wait_before(4, None, Duration::ZERO), None, "three tries made");
        assert_eq!(plain().attempts(0).wait_before(2, None, Duration::ZERO), None, "one try at least, no retry");
        let tight = plain().total_wait(Duration::from_secs(1));
        assert_eq!(tight.wait_before(2, Some(Duration::from_secs(2)), Duration::ZERO), None, "would wait past 1 s");
        assert_eq!(tight.wait_before(2, None, 950 * MS), None, "950 ms waited + 100 ms > 1 s");
        assert_eq!(tight.wait_before(2, None, 900 * MS), Some(100 * MS));
    }

    #[test]
    fn jitter_stays_between_half_the_backoff_and_all_of_it() {
        let policy = plain().jitter(true);
        let waits: Vec<Duration> = (0..200).filter_map(|_| policy.wait_before(2, None, Duration::ZERO)).collect();
        assert_eq!(waits.len(), 200);
        assert!(waits.iter().all(|w| (50 * MS..=100 * MS).contains(w)), "{waits:?}");
        assert!(waits.iter().any(|w| *w != waits[0]), "the waits differ");
        let asked = policy.wait_before(2, Some(Duration::from_secs(1)), Duration::ZERO);
        assert_eq!(asked, Some(Duration::from_secs(1)), "jitter never shortens a Retry-After");
    }
}
