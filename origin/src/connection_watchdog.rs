//! The slow-client defence, one timer per connection instead of one per request.
//!
//! hyper's `header_read_timeout` arms a boxed sleep for every request head it reads, and takes
//! it off the timer wheel again once the head is in: on a keep-alive connection answering
//! "no"s, that is a timer insert and removal per request. Here each connection has one
//! watchdog that ticks every half timeout and asks only "did a request start since the last
//! tick, or is one running?" (two counters the connection's own task writes). A connection
//! that spends three ticks in a row waiting for a request head (half-sent, or idle between
//! requests) is closed: after at least the timeout and at most one and a half.

use hyper::body::Incoming;
use hyper::Request;
use pin_project_lite::pin_project;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

/// Ticks in a row a connection may wait for a request head before it is closed.
const QUIET_TICKS_TO_CLOSE: u32 = 3;

/// What a connection's requests did, counted by the connection's own task.
#[derive(Default)]
pub struct Activity {
    started: AtomicU64,
    ended: AtomicU64,
}

impl Activity {
    fn seen(&self) -> Seen {
        let started = self.started.load(Relaxed);
        Seen { started, running: started != self.ended.load(Relaxed) }
    }
}

/// What a tick saw of a connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Seen {
    /// Requests started so far.
    started: u64,
    /// Whether one is being answered.
    running: bool,
}

/// The watchdog's decision, pure: fed what each tick saw.
#[derive(Debug, Default)]
struct Watch {
    last: Option<Seen>,
    quiet: u32,
}

impl Watch {
    /// Whether the connection should be closed, given what this tick saw.
    fn tick(&mut self, now: Seen) -> bool {
        let waiting_since_last =
            !now.running && self.last.is_some_and(|last| !last.running && last.started == now.started);
        // The first tick of a wait counts too: the wait began at most one tick before it.
        self.quiet = match (now.running, waiting_since_last) {
            (true, _) => 0,
            (false, true) => self.quiet + 1,
            (false, false) => 1,
        };
        self.last = Some(now);
        self.quiet >= QUIET_TICKS_TO_CLOSE
    }
}

/// Resolves once the connection whose requests `activity` counts has waited for a request head
/// for `timeout` (at most one and a half): the caller then drops the connection.
pub async fn expired(activity: &Activity, timeout: Duration) {
    let mut ticks = tokio::time::interval(timeout / 2);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut watch = Watch::default();
    loop {
        ticks.tick().await;
        if watch.tick(activity.seen()) {
            return;
        }
    }
}

/// A connection's service, counting its requests into [`Activity`].
#[derive(Clone)]
pub struct Watched<S> {
    inner: S,
    activity: Arc<Activity>,
}

impl<S> Watched<S> {
    /// `inner`, its requests counted into `activity`.
    pub fn new(inner: S, activity: Arc<Activity>) -> Watched<S> {
        Watched { inner, activity }
    }
}

impl<S> hyper::service::Service<Request<Incoming>> for Watched<S>
where
    S: hyper::service::Service<Request<Incoming>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Answering<S::Future>;

    fn call(&self, request: Request<Incoming>) -> Self::Future {
        self.activity.started.fetch_add(1, Relaxed);
        Answering { inner: self.inner.call(request), activity: Ended(self.activity.clone()) }
    }
}

/// Counts a request as ended when dropped: answered, or given up by a client that hung up.
struct Ended(Arc<Activity>);

impl Drop for Ended {
    fn drop(&mut self) {
        self.0.ended.fetch_add(1, Relaxed);
    }
}

pin_project! {
    /// A request being answered.
    pub struct Answering<F> {
        #[pin]
        inner: F,
        activity: Ended,
    }
}

impl<F: Future> Future for Answering<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        self.project().inner.poll(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn waiting(started: u64) -> Seen {
        Seen { started, running: false }
    }

    #[test]
    fn a_connection_waiting_three_ticks_in_a_row_is_closed() {
        let mut watch = Watch::default();
        // A new connection that never sends a whole head: ticks 1 and 2 pass, 3 closes.
        assert!(!watch.tick(waiting(0)));
        assert!(!watch.tick(waiting(0)));
        assert!(watch.tick(waiting(0)));
    }

    #[test]
    fn a_request_started_or_running_restarts_the_count() {
        let mut watch = Watch::default();
        assert!(!watch.tick(waiting(0)));
        assert!(!watch.tick(waiting(0)));
        // A request came and went between these ticks: the wait starts over.
        assert!(!watch.tick(waiting(1)));
        assert!(!watch.tick(waiting(1)));
        // One is running at this tick (however long it takes, it is not a slow head).
        assert!(!watch.tick(Seen { started: 2, running: true }));
        assert!(!watch.tick(Seen { started: 2, running: true }));
        assert!(!watch.tick(waiting(2)));
        assert!(!watch.tick(waiting(2)));
        assert!(watch.tick(waiting(2)), "three quiet ticks after the answer");
    }

    #[test]
    fn requests_are_counted_as_ended_however_they_end() {
        let activity = Arc::new(Activity::default());
        activity.started.fetch_add(1, Relaxed);
        let ended = Ended(activity.clone());
        assert!(activity.seen().running);
        drop(ended);
        assert_eq!(activity.seen(), waiting(1));
    }
}
