//! Collects a run's history, and the harness's notes, from many tasks at once, on one clock.

use super::{DbCheck, EdgeDown, Fault, History, LogLine, Micros, Op, OriginCounters, RssSample, Skipped};
use std::sync::Mutex;
use std::time::Instant;

/// Collects a history, and the harness's notes, from many tasks at once.
pub struct Recorder {
    clock: Instant,
    history: Mutex<History>,
    notes: Mutex<Vec<String>>,
}

/// Milliseconds since the Unix epoch by this machine's clock (the origins' clock too).
pub fn unix_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

impl Default for Recorder {
    fn default() -> Self {
        Recorder::new()
    }
}

impl Recorder {
    /// Starts the clock.
    pub fn new() -> Recorder {
        let started_unix_ms = unix_ms();
        Recorder {
            clock: Instant::now(),
            history: Mutex::new(History { started_unix_ms, ..History::default() }),
            notes: Mutex::new(Vec::new()),
        }
    }

    /// Now, on the run's clock.
    pub fn now(&self) -> Micros {
        self.clock.elapsed().as_micros() as Micros
    }

    fn with<T>(&self, f: impl FnOnce(&mut History) -> T) -> T {
        f(&mut self.history.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Records a finished operation.
    pub fn op(&self, op: Op) {
        self.with(|h| h.ops.push(op));
    }

    /// Records an operation not sent (too many in flight).
    pub fn skipped(&self, edge: bool) {
        let at = self.now();
        self.with(|h| h.skipped.push(Skipped { at, edge }));
    }

    /// Records what an origin's metrics said so far (replacing what was recorded before).
    pub fn origin_counters(&self, origin: u8, counters: OriginCounters) {
        self.with(|h| {
            h.origin_counters.insert(origin, counters);
        });
    }

    /// Records a fault whose window is over.
    pub fn fault(&self, fault: Fault) {
        self.with(|h| h.faults.push(fault));
    }

    /// Records a memory sample.
    pub fn rss(&self, sample: RssSample) {
        self.with(|h| h.rss.push(sample));
    }

    /// Records the end-of-run Cassandra reads.
    pub fn db_checks(&self, checks: Vec<DbCheck>) {
        self.with(|h| h.db_checks.extend(checks));
    }

    /// Records that the edge stopped answering (once; later calls are ignored).
    pub fn edge_down(&self, down: EdgeDown) {
        self.with(|h| {
            h.edge_down.get_or_insert(down);
        });
    }

    /// Notes something the harness noticed (missed phases, failed steps, the edge given up
    /// on), stamped with the run's time, and says it on stderr.
    pub fn note(&self, text: String) {
        let at = self.now() as f64 / 1e6;
        eprintln!("chaos: {at:>7.1}s {text}");
        self.notes.lock().unwrap_or_else(|e| e.into_inner()).push(format!("{at:.1}s {text}"));
    }

    /// The notes so far.
    pub fn notes(&self) -> Vec<String> {
        self.notes.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Records panic lines.
    pub fn panics(&self, lines: Vec<LogLine>) {
        self.with(|h| h.panics.extend(lines));
    }

    /// Faults so far (for the schedule's bookkeeping).
    pub fn faults(&self) -> Vec<Fault> {
        self.with(|h| h.faults.clone())
    }

    /// Operations so far.
    pub fn op_count(&self) -> usize {
        self.with(|h| h.ops.len())
    }

    /// The history, taken out of the recorder at the end of the run.
    pub fn take(&self) -> History {
        self.with(std::mem::take)
    }
}
