//! Observed fault windows: stalls nobody injected. Cassandra (a 1 GB heap on 2 cores) or the
//! whole machine can stop answering for seconds on its own; the origins then answer 503 with
//! Retry-After, which is right, and the checker must not call it a violation. So a prober
//! asks Cassandra (`SELECT release_version FROM system.local`) and Redis (`PING` on a
//! connection of its own, not through the fault proxies) every [`PROBE_INTERVAL`], and a
//! probe slower than its threshold (half the origins' own timeout for that system: a stall
//! shorter than that makes no origin give up) opens an observed window, recorded as a fault
//! of kind `observed_cassandra_stall` / `observed_redis_stall`. The window runs from the start
//! of the first slow probe to the end of the next fast one (or of one that failed fast: the
//! system answers again, if only to refuse).
//!
//! An observed window only ever excuses a 503/429 *with* Retry-After (see
//! [`check`](crate::check)); and since it needs a slow probe straight to the system, it cannot
//! excuse an origin that answers 503 while Cassandra and Redis answer the prober in time.

use crate::history::{Fault, FaultKind, Micros, Recorder};
use crate::origin_process::OriginTuning;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Time between the starts of two probes of one system (a slow probe delays the next).
pub const PROBE_INTERVAL: Duration = Duration::from_millis(200);

/// Thresholds and timeouts of the probes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProbeSettings {
    /// A Cassandra probe slower than this opens a window.
    pub cassandra_threshold: Duration,
    /// A Cassandra probe is given up on after this (and counts as slow).
    pub cassandra_timeout: Duration,
    /// A Redis probe slower than this opens a window.
    pub redis_threshold: Duration,
    /// A Redis probe is given up on after this (and counts as slow).
    pub redis_timeout: Duration,
}

impl ProbeSettings {
    /// Half of the origins' Cassandra timeout and of their Redis write timeout (the longer
    /// Redis one: a lookup that times out on Redis still asks Cassandra, a write answers
    /// 503); a probe waits twice the timeout.
    pub fn from_tuning(t: &OriginTuning) -> ProbeSettings {
        ProbeSettings {
            cassandra_threshold: Duration::from_millis(t.cassandra_timeout_ms / 2),
            cassandra_timeout: Duration::from_millis(t.cassandra_timeout_ms * 2),
            redis_threshold: Duration::from_millis(t.redis_write_timeout_ms / 2),
            redis_timeout: Duration::from_millis(t.redis_write_timeout_ms * 2),
        }
    }
}

/// The stall open so far.
#[derive(Clone, Debug)]
struct Open {
    start: Micros,
    probes: u32,
    slowest: Micros,
    error: Option<String>,
}

/// Turns one system's probes into observed windows. Pure: the probe loops feed it.
#[derive(Clone, Debug)]
pub struct StallTracker {
    kind: FaultKind,
    threshold: Micros,
    open: Option<Open>,
}

impl StallTracker {
    /// A tracker recording windows of `kind` for probes slower than `threshold`.
    pub fn new(kind: FaultKind, threshold: Duration) -> StallTracker {
        StallTracker { kind, threshold: threshold.as_micros() as Micros, open: None }
    }

    /// One probe from `start` to `end` (a timed-out probe ends at its timeout) and how it
    /// went. Returns the window a fast probe closed.
    pub fn probe(&mut self, start: Micros, end: Micros, result: Result<(), String>) -> Option<Fault> {
        let took = end.saturating_sub(start);
        if took > self.threshold {
            let open = self.open.get_or_insert(Open { start, probes: 0, slowest: 0, error: None });
            open.probes += 1;
            open.slowest = open.slowest.max(took);
            if let Err(e) = result {
                open.error = Some(e);
            }
            return None;
        }
        let fast = match &result {
            Ok(()) => "answered",
            Err(_) => "failed",
        };
        self.close(end, &format!("then {fast} in {} ms", took / 1000))
    }

    /// Closes a window still open at the end of the run.
    pub fn finish(&mut self, now: Micros) -> Option<Fault> {
        self.close(now, "still slow when the run ended")
    }

    fn close(&mut self, end: Micros, how: &str) -> Option<Fault> {
        let open = self.open.take()?;
        let error = open.error.map(|e| format!("; last error: {e}")).unwrap_or_default();
        let note = format!(
            "probe took {} ms (threshold {} ms; {} slow probes{error}), {how}",
            open.slowest / 1000,
            self.threshold / 1000,
            open.probes
        );
        Some(Fault { kind: self.kind, start: open.start, end, origin: None, recovered: None, note, copy_held: None })
    }
}

/// Probes one system until `stop`, recording its windows (one still open at the end too).
async fn probe_loop<F, Fut>(
    rec: Arc<Recorder>,
    stop: Arc<AtomicBool>,
    mut tracker: StallTracker,
    timeout: Duration,
    mut probe: F,
) where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(), String>>,
{
    let mut tick = tokio::time::interval(PROBE_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    while !stop.load(Ordering::SeqCst) {
        tick.tick().await;
        let start = rec.now();
        let result = match tokio::time::timeout(timeout, probe()).await {
            Ok(result) => result,
            Err(_) => Err(format!("no answer within {} ms", timeout.as_millis())),
        };
        if let Some(window) = tracker.probe(start, rec.now(), result) {
            eprintln!(
                "chaos: {:>7.1}s {} ({}): {}",
                window.start as f64 / 1e6,
                window.kind.name(),
                secs(&window),
                window.note
            );
            rec.fault(window);
        }
    }
    if let Some(window) = tracker.finish(rec.now()) {
        rec.fault(window);
    }
}

fn secs(f: &Fault) -> String {
    format!("{:.1}s", (f.end - f.start) as f64 / 1e6)
}

/// The prober: one loop per system, stopped (and its open windows recorded) by [`stop`](Self::stop).
pub struct Prober {
    stop: Arc<AtomicBool>,
    tasks: tokio::task::JoinSet<()>,
}

impl Prober {
    /// Starts probing Cassandra through `session` and Redis at `redis_url` (directly).
    pub fn start(
        rec: Arc<Recorder>,
        settings: ProbeSettings,
        session: Option<Arc<scylla::client::session::Session>>,
        redis_url: String,
    ) -> Prober {
        let stop = Arc::new(AtomicBool::new(false));
        let mut tasks = tokio::task::JoinSet::new();
        if let Some(session) = session {
            let tracker = StallTracker::new(FaultKind::ObservedCassandraStall, settings.cassandra_threshold);
            tasks.spawn(probe_loop(rec.clone(), stop.clone(), tracker, settings.cassandra_timeout, move || {
                let session = session.clone();
                async move {
                    session
                        .query_unpaged("SELECT release_version FROM system.local", ())
                        .await
                        .map(|_| ())
                        .map_err(|e| e.to_string())
                }
            }));
        }
        let tracker = StallTracker::new(FaultKind::ObservedRedisStall, settings.redis_threshold);
        let redis = Arc::new(RedisProbe::new(redis_url));
        tasks.spawn(probe_loop(rec, stop.clone(), tracker, settings.redis_timeout, move || {
            let redis = redis.clone();
            async move { redis.ping().await }
        }));
        Prober { stop, tasks }
    }

    /// Stops probing and waits for the loops to record what is still open.
    pub async fn stop(mut self) {
        self.stop.store(true, Ordering::SeqCst);
        while self.tasks.join_next().await.is_some() {}
    }
}

/// `PING` on a connection of the prober's own, made again after any failure (Redis is
/// killed and restarted by faults). The client's own timeouts are off: the probe's timeout
/// is the loop's, and a slow answer must be seen as slow, not as an error at 500 ms.
struct RedisProbe {
    client: Result<redis::Client, String>,
    conn: tokio::sync::Mutex<Option<redis::aio::MultiplexedConnection>>,
}

impl RedisProbe {
    fn new(url: String) -> RedisProbe {
        RedisProbe { client: redis::Client::open(url).map_err(|e| e.to_string()), conn: tokio::sync::Mutex::new(None) }
    }

    async fn ping(&self) -> Result<(), String> {
        let client = self.client.as_ref().map_err(Clone::clone)?;
        let mut conn = self.conn.lock().await;
        // Dropped unless the PING answers: a probe cut short by its timeout leaves none.
        let mut c = match conn.take() {
            Some(c) => c,
            None => {
                let config =
                    redis::AsyncConnectionConfig::new().set_connection_timeout(None).set_response_timeout(None);
                client.get_multiplexed_async_connection_with_config(&config).await.map_err(|e| e.to_string())?
            }
        };
        let pong: String = redis::cmd("PING").query_async(&mut c).await.map_err(|e| e.to_string())?;
        if pong != "PONG" {
            return Err(format!("PING answered {pong:?}"));
        }
        *conn = Some(c);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Micros = 1000;

    fn tracker() -> StallTracker {
        StallTracker::new(FaultKind::ObservedCassandraStall, Duration::from_millis(750))
    }

    #[test]
    fn the_thresholds_follow_the_origins_timeouts() {
        let s = ProbeSettings::from_tuning(&OriginTuning::default());
        assert_eq!(s.cassandra_threshold, Duration::from_millis(750));
        assert_eq!(s.redis_threshold, Duration::from_millis(500));
        assert!(s.cassandra_timeout > s.cassandra_threshold && s.redis_timeout > s.redis_threshold);
    }

    #[test]
    fn fast_probes_record_nothing() {
        let mut t = tracker();
        for i in 0..10 {
            assert_eq!(t.probe(i * 200 * MS, i * 200 * MS + 5 * MS, Ok(())), None);
        }
        assert_eq!(t.probe(3000 * MS, 3000 * MS + 750 * MS, Ok(())), None, "at the threshold is not above it");
        assert_eq!(t.finish(10_000 * MS), None);
    }

    #[test]
    fn slow_probes_open_a_window_that_the_next_fast_one_closes() {
        let mut t = tracker();
        assert_eq!(t.probe(0, 2 * MS, Ok(())), None);
        // No answer within the probe's timeout, then a slow answer, then a fast one.
        assert_eq!(t.probe(200 * MS, 3200 * MS, Err("no answer within 3000 ms".into())), None);
        assert_eq!(t.probe(3200 * MS, 4100 * MS, Ok(())), None);
        let window = t.probe(4300 * MS, 4310 * MS, Ok(())).unwrap();
        assert_eq!(window.kind, FaultKind::ObservedCassandraStall);
        assert_eq!((window.start, window.end), (200 * MS, 4310 * MS));
        assert!(window.kind.is_observed());
        assert!(window.note.contains("probe took 3000 ms"), "{}", window.note);
        assert!(window.note.contains("2 slow probes"), "{}", window.note);
        assert!(window.note.contains("no answer within 3000 ms"), "{}", window.note);
        assert_eq!(t.probe(4500 * MS, 4505 * MS, Ok(())), None, "closed once");
    }

    #[test]
    fn a_fast_failure_closes_a_window_and_opens_none() {
        let mut t = tracker();
        assert_eq!(t.probe(0, 5 * MS, Err("connection refused".into())), None);
        t.probe(200 * MS, 1200 * MS, Ok(()));
        let window = t.probe(1400 * MS, 1401 * MS, Err("connection refused".into())).unwrap();
        assert_eq!((window.start, window.end), (200 * MS, 1401 * MS));
    }

    #[test]
    fn a_window_open_at_the_end_is_closed_there() {
        let mut t = tracker();
        t.probe(0, 1000 * MS, Ok(()));
        let window = t.finish(1500 * MS).unwrap();
        assert_eq!((window.start, window.end), (0, 1500 * MS));
        assert!(window.note.contains("still slow"));
    }
}
