//! Counters, a gauge and a latency histogram that the request path writes without writing a
//! cache line another core writes too.
//!
//! prometheus-client's counter is one atomic every worker increments, and its histogram a
//! mutex: on every "no", tens of cache lines moved between the two cores (BENCHMARKS.md, the
//! origin's "no" path). Here each value is split into stripes, one cache-line pair each; a
//! thread writes the stripe it was given on its first write, and a scrape sums the stripes.
//! Exported exactly as prometheus-client exports its own types (same names, types, buckets and
//! text; `tests` compares them), so no series changes name or meaning.
//!
//! A stripe is still written with an atomic add: there can be more threads than stripes (the
//! blocking pool), and two threads sharing a stripe must not lose a count.

use super::LATENCY_BUCKETS;
use prometheus_client::encoding::{EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::{MetricType, TypedMetric};
use std::cell::Cell;
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

/// Stripes per value: more than the cores this runs on in practice, so threads rarely share.
const STRIPES: usize = 16;

/// One stripe, alone on its two cache lines (x86's adjacent-line prefetcher moves lines in
/// pairs, so 64-byte alignment would still share).
#[repr(align(128))]
#[derive(Default)]
struct Padded<T>(T);

/// The stripe this thread writes: handed out round-robin on the thread's first write.
fn stripe() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static STRIPE: Cell<usize> = const { Cell::new(usize::MAX) };
    }
    STRIPE.with(|s| {
        if s.get() == usize::MAX {
            s.set(NEXT.fetch_add(1, Relaxed) % STRIPES);
        }
        s.get()
    })
}

/// A monotonic counter (clones share the value), exported as a counter.
#[derive(Clone, Default)]
pub struct StripedCounter(Arc<[Padded<AtomicU64>; STRIPES]>);

impl StripedCounter {
    /// Adds one.
    pub fn inc(&self) {
        self.inc_by(1);
    }

    /// Adds `n`.
    pub fn inc_by(&self, n: u64) {
        self.0[stripe()].0.fetch_add(n, Relaxed);
    }

    /// The count so far.
    pub fn get(&self) -> u64 {
        self.0.iter().map(|s| s.0.load(Relaxed)).sum()
    }
}

impl std::fmt::Debug for StripedCounter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("StripedCounter").field(&self.get()).finish()
    }
}

impl TypedMetric for StripedCounter {
    const TYPE: MetricType = MetricType::Counter;
}

impl EncodeMetric for StripedCounter {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        encoder.encode_counter::<NoLabelSet, _, u64>(&self.get(), None)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

/// A level raised and lowered by the same holder: [`StripedGauge::raise`] returns the
/// [`Stripe`] it raised, which [`StripedGauge::lower`] takes back, so no stripe goes below zero
/// and a scrape never reads a negative level, whichever threads raise and lower.
#[derive(Clone, Default)]
pub struct StripedGauge(Arc<[Padded<AtomicI64>; STRIPES]>);

/// The stripe one unit of a [`StripedGauge`] was raised on: give it back to `lower`.
#[must_use = "lower the gauge with it"]
#[derive(Debug)]
pub struct Stripe(usize);

impl StripedGauge {
    /// Raises the level by one, until `lower` is given the returned stripe.
    pub fn raise(&self) -> Stripe {
        let stripe = stripe();
        self.0[stripe].0.fetch_add(1, Relaxed);
        Stripe(stripe)
    }

    /// Lowers the level raised on `stripe`.
    pub fn lower(&self, stripe: Stripe) {
        self.0[stripe.0].0.fetch_sub(1, Relaxed);
    }

    /// The level now.
    pub fn get(&self) -> i64 {
        self.0.iter().map(|s| s.0.load(Relaxed)).sum()
    }
}

impl std::fmt::Debug for StripedGauge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("StripedGauge").field(&self.get()).finish()
    }
}

impl TypedMetric for StripedGauge {
    const TYPE: MetricType = MetricType::Gauge;
}

impl EncodeMetric for StripedGauge {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        encoder.encode_gauge(&self.get())
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

/// Buckets of the latency histogram: one per bound, and the last for everything above.
const BUCKETS: usize = LATENCY_BUCKETS.len() + 1;

/// One stripe of a histogram: the observations per bucket and their sum in nanoseconds. The
/// count is the buckets' sum, so a scrape's count always equals its `+Inf` bucket.
#[derive(Default)]
struct HistogramStripe {
    buckets: [AtomicU64; BUCKETS],
    sum_nanos: AtomicU64,
}

/// A latency histogram with [`LATENCY_BUCKETS`] (clones share the value), exported as a
/// histogram in seconds.
#[derive(Clone, Default)]
pub struct StripedLatency(Arc<[Padded<HistogramStripe>; STRIPES]>);

/// Which bucket `elapsed` falls in: the first whose bound it does not exceed, as
/// prometheus-client's histogram counts.
fn bucket_of(elapsed: Duration) -> usize {
    let seconds = elapsed.as_secs_f64();
    LATENCY_BUCKETS.iter().position(|bound| seconds <= *bound).unwrap_or(LATENCY_BUCKETS.len())
}

impl StripedLatency {
    /// Records one observation.
    pub fn observe(&self, elapsed: Duration) {
        let stripe = &self.0[stripe()].0;
        stripe.buckets[bucket_of(elapsed)].fetch_add(1, Relaxed);
        let nanos = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX);
        stripe.sum_nanos.fetch_add(nanos, Relaxed);
    }

    /// Observations so far, per bucket (not cumulative), and their sum in seconds.
    fn totals(&self) -> ([u64; BUCKETS], f64) {
        let mut buckets = [0u64; BUCKETS];
        let mut nanos = 0u64;
        for stripe in self.0.iter() {
            for (total, bucket) in buckets.iter_mut().zip(&stripe.0.buckets) {
                *total += bucket.load(Relaxed);
            }
            nanos = nanos.wrapping_add(stripe.0.sum_nanos.load(Relaxed));
        }
        (buckets, Duration::from_nanos(nanos).as_secs_f64())
    }

    /// Observations so far.
    pub fn count(&self) -> u64 {
        self.totals().0.iter().sum()
    }
}

impl std::fmt::Debug for StripedLatency {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("StripedLatency").field(&self.count()).finish()
    }
}

impl TypedMetric for StripedLatency {
    const TYPE: MetricType = MetricType::Histogram;
}

impl EncodeMetric for StripedLatency {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let (counts, sum) = self.totals();
        let bounds = LATENCY_BUCKETS.iter().copied().chain(std::iter::once(f64::INFINITY));
        let buckets: Vec<(f64, u64)> = bounds.zip(counts).collect();
        encoder.encode_histogram::<NoLabelSet>(sum, buckets.iter().map(|(_, n)| n).sum(), &buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

#[cfg(test)]
mod tests {
    use super::super::latency_histogram;
    use super::*;
    use prometheus_client::encoding::text::encode;
    use prometheus_client::metrics::counter::Counter;
    use prometheus_client::metrics::gauge::Gauge;
    use prometheus_client::registry::{Metric, Registry};

    fn text(metric: impl Metric) -> String {
        let mut registry = Registry::default();
        registry.register("m", "help", metric);
        let mut out = String::new();
        encode(&mut out, &registry).unwrap();
        out
    }

    /// The same observations, from several threads, export the same text as
    /// prometheus-client's own types.
    #[test]
    fn export_exactly_as_prometheus_client_does() {
        let (counter, theirs) = (StripedCounter::default(), Counter::<u64>::default());
        let (latency, their_latency) = (StripedLatency::default(), latency_histogram());
        // Whole microseconds: their sum adds f64 seconds, ours nanoseconds; these sum exactly.
        let samples: Vec<Duration> =
            [0, 100, 250, 251, 999, 2_500, 40_000, 3_000_000].iter().map(|&us| Duration::from_micros(us)).collect();
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for d in &samples {
                        counter.inc_by(3);
                        latency.observe(*d);
                    }
                });
            }
        });
        for _ in 0..4 {
            for d in &samples {
                theirs.inc_by(3);
                their_latency.observe(d.as_secs_f64());
            }
        }
        assert_eq!(counter.get(), 96);
        assert_eq!(text(counter), text(theirs));
        assert_eq!(latency.count(), 32);
        assert_eq!(text(latency), text(their_latency));
    }

    #[test]
    fn bounds_are_inclusive_as_theirs_are() {
        assert_eq!(bucket_of(Duration::from_micros(100)), 0, "0.0001 s is in the 0.0001 bucket");
        assert_eq!(bucket_of(Duration::from_nanos(100_001)), 1);
        assert_eq!(bucket_of(Duration::from_secs(3)), LATENCY_BUCKETS.len(), "above every bound: +Inf");
        assert_eq!(bucket_of(Duration::ZERO), 0);
    }

    #[test]
    fn a_gauge_is_lowered_on_the_stripe_it_was_raised_on() {
        let gauge = StripedGauge::default();
        let held: Vec<Stripe> = (0..3).map(|_| gauge.raise()).collect();
        // Lowered on other threads: each unit goes back to its own stripe.
        std::thread::scope(|s| {
            for unit in held {
                let gauge = &gauge;
                s.spawn(move || gauge.lower(unit));
            }
        });
        assert_eq!(gauge.get(), 0);
        assert!(gauge.0.iter().all(|s| s.0.load(Relaxed) == 0), "no stripe left above or below zero");
        let _one = gauge.raise();
        let theirs = Gauge::<i64>::default();
        theirs.inc();
        assert_eq!(text(gauge.clone()), text(theirs));
    }
}
