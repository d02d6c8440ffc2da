//! The isolate's counts for the fleet: what it did since its last data point, written to a
//! Workers Analytics Engine dataset, so an operator sees every isolate at once (one SQL query;
//! docs/operations.md) where the isolate report shows one. Without I/O: when a point is due,
//! what it carries, what the points written add up to (the report shows that too, so the two
//! can be compared).
//!
//! A point carries deltas, not totals: Analytics Engine samples points and weighs each kept one
//! by `_sample_interval`, so `SUM(_sample_interval * doubleN)` estimates a fleet's total only if
//! every point counts something once. Two columns are gauges (wasm memory, held bytes), read
//! with a weighted quantile or a maximum. Every point names its layout in `blob1`
//! ([`COUNTS`], and [`FEED`] beside it when the shared feed is followed: a point has at most 20
//! doubles): a later layout gets a new name, and the queries select by it, so points of two
//! versions mid-deploy are never summed together as one.

use bloomgate_client::api::{FleetPoints, IsolateCounts};
use std::collections::BTreeMap;

/// The binding the worker writes through (`[[analytics_engine_datasets]]` in wrangler.toml).
/// Unbound, the worker writes nothing and its report says so.
pub const BINDING: &str = "EDGE_COUNTS";
/// The layout of the isolate's counts, in its points' `blob1`.
pub const POINT_FORMAT: &str = "bloomgate-edge-counts/1";
/// The layout of the shared feed's counts, in its points' `blob1`.
pub const FEED_POINT_FORMAT: &str = "bloomgate-edge-feed/1";
/// Default seconds between an isolate's points (`FLEET_POINT_SECS`).
pub const DEFAULT_POINT_SECS: u32 = 60;

/// Whether a column counts (a delta since the isolate's last point) or reads a level now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Summed across points: `SUM(_sample_interval * doubleN)`.
    Delta,
    /// A level at the point's time: a weighted quantile or a maximum, never a sum.
    Gauge,
}

/// A point's layout: its name (`blob1`) and its doubles in order (`double1` first).
#[derive(Debug)]
pub struct Layout {
    /// In `blob1`.
    pub format: &'static str,
    /// The doubles.
    pub columns: &'static [Column],
}

/// One double: its name (the isolate report's), whether it counts or reads a level, and its
/// level in a sample, given when the isolate started (ms; a delta's running total).
#[derive(Debug)]
pub struct Column {
    /// The name.
    pub name: &'static str,
    /// Count or level.
    pub kind: Kind,
    read: fn(&Sample, u64) -> u64,
}

const fn count(name: &'static str, read: fn(&Sample, u64) -> u64) -> Column {
    Column { name, kind: Kind::Delta, read }
}

const fn level(name: &'static str, read: fn(&Sample, u64) -> u64) -> Column {
    Column { name, kind: Kind::Gauge, read }
}

/// The time a point covers: a count, since the isolate started.
const SPAN_MS: Column = count("span_ms", |s, started_ms| s.at_ms.saturating_sub(started_ms));

/// The isolate's counts.
pub const COUNTS: Layout = Layout {
    format: POINT_FORMAT,
    columns: &[
        count("requests", |s, _| s.counts.requests),
        count("edge_no", |s, _| s.counts.edge_no),
        count("forwarded", |s, _| s.counts.forwarded),
        count("batches", |s, _| s.counts.batches),
        count("batch_keys", |s, _| s.counts.batch_keys),
        count("batch_keys_forwarded", |s, _| s.counts.batch_keys_forwarded),
        count("cache_reads", |s, _| s.counts.cache_reads),
        count("cache_hits", |s, _| s.counts.cache_hits),
        count("cache_refused", |s, _| s.counts.cache_refused),
        count("cache_puts", |s, _| s.counts.cache_puts),
        count("cache_write_backs", |s, _| s.counts.cache_write_backs),
        count("origin_manifests", |s, _| s.counts.origin_manifests),
        count("origin_segments", |s, _| s.counts.origin_segments),
        count("origin_journal", |s, _| s.counts.origin_journal),
        count("origin_bytes", |s, _| s.counts.origin_bytes),
        count("local_catch_ups", |s, _| s.counts.local_catch_ups),
        count("dropped_by_switch", |s, _| s.counts.dropped_by_switch),
        SPAN_MS,
        level("wasm_bytes", |s, _| s.wasm_bytes),
        level("held_bytes", |s, _| s.held_bytes),
    ],
};

/// The shared feed's counts (`SHARED_FEED`), written beside [`COUNTS`] at the same moments.
pub const FEED: Layout = Layout {
    format: FEED_POINT_FORMAT,
    columns: &[
        count("feed_no", |s, _| s.counts.feed_no),
        count("feed_requests", |s, _| s.counts.feed_requests),
        count("feed_fallbacks", |s, _| s.counts.feed_fallbacks),
        SPAN_MS,
    ],
};

/// What the isolate reads of itself when a point is due.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Sample {
    /// Its counts since it started.
    pub counts: IsolateCounts,
    /// Its wasm linear memory now.
    pub wasm_bytes: u64,
    /// What it holds now against its budget.
    pub held_bytes: u64,
    /// Now, ms on the isolate's clock.
    pub at_ms: u64,
}

/// A data point's doubles, in its layout's order (its blobs and index are the glue's: the
/// layout, the data centre, the isolate).
pub type Point = Vec<f64>;

/// One isolate's points of one layout: when the next is due, and what those written add up to.
#[derive(Debug)]
pub struct FleetCounts {
    layout: &'static Layout,
    every_ms: u64,
    started_ms: u64,
    /// Running totals as of the last point written (zero before any).
    last: Vec<f64>,
    last_at_ms: Option<u64>,
    points: u64,
    refused: u64,
}

impl FleetCounts {
    /// An isolate started at `started_ms` that writes a point of `layout` at most every
    /// `every_secs`.
    pub fn new(layout: &'static Layout, every_secs: u32, started_ms: u64) -> FleetCounts {
        let every_ms = u64::from(every_secs) * 1000;
        let last = vec![0.0; layout.columns.len()];
        FleetCounts { layout, every_ms, started_ms, last, last_at_ms: None, points: 0, refused: 0 }
    }

    /// The layout.
    pub fn layout(&self) -> &'static Layout {
        self.layout
    }

    /// Whether a point is due at `now_ms`: the first request's, then one per interval.
    pub fn due(&self, now_ms: u64) -> bool {
        self.last_at_ms.is_none_or(|last| now_ms >= last + self.every_ms)
    }

    /// The point for `sample` (what changed since the last; gauges as they are now). Taken as
    /// written: call [`refused`](Self::refused) if the write then fails, and those deltas go
    /// into the next point.
    pub fn point(&mut self, sample: &Sample) -> Point {
        let now: Vec<f64> = self.layout.columns.iter().map(|c| (c.read)(sample, self.started_ms) as f64).collect();
        let point = self
            .layout
            .columns
            .iter()
            .zip(now.iter().zip(&self.last))
            .map(|(column, (now, last))| if column.kind == Kind::Delta { now - last } else { *now })
            .collect();
        self.last = now;
        self.last_at_ms = Some(sample.at_ms);
        self.points += 1;
        point
    }

    /// The last point's write failed: its deltas go into the next one, due an interval later
    /// (a binding that keeps refusing costs one try per interval, not one per request).
    pub fn refused(&mut self, point: &Point) {
        self.take_back(point);
        self.refused += 1;
    }

    /// The last point had nowhere to go (no dataset bound): as if not taken.
    pub fn unbound(&mut self, point: &Point) {
        self.take_back(point);
    }

    fn take_back(&mut self, point: &Point) {
        for (i, column) in self.layout.columns.iter().enumerate() {
            if column.kind == Kind::Delta {
                self.last[i] -= point[i];
            }
        }
        self.points -= 1;
    }

    /// Points written, and writes refused.
    pub fn written(&self) -> (u64, u64) {
        (self.points, self.refused)
    }

    /// What the written points' counting columns add up to, by name (those `sent` has already
    /// are left: the same moments' span, from another layout).
    pub fn add_sent(&self, sent: &mut BTreeMap<String, u64>) {
        for (column, total) in self.layout.columns.iter().zip(&self.last) {
            if column.kind == Kind::Delta {
                sent.entry(column.name.to_owned()).or_insert(*total as u64);
            }
        }
    }
}

/// What the isolate report says of the points: whether the dataset is bound, how many points
/// of [`COUNTS`] (and of [`FEED`]), refusals, and what their counting columns add up to (equal
/// to the counts as of the last point).
pub fn report(bound: bool, counts: &FleetCounts, feed: &FleetCounts) -> FleetPoints {
    let mut sent = BTreeMap::new();
    counts.add_sent(&mut sent);
    if feed.points > 0 {
        feed.add_sent(&mut sent);
    }
    FleetPoints {
        bound,
        format: POINT_FORMAT.to_owned(),
        every_secs: counts.every_ms / 1000,
        points: counts.points,
        feed_points: feed.points,
        refused: counts.refused + feed.refused,
        sent,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(requests: u64, edge_no: u64, wasm_bytes: u64, at_ms: u64) -> Sample {
        let counts = IsolateCounts { requests, edge_no, feed_no: edge_no, ..IsolateCounts::default() };
        Sample { counts, wasm_bytes, held_bytes: 7, at_ms }
    }

    fn column(layout: &Layout, name: &str) -> usize {
        layout.columns.iter().position(|c| c.name == name).unwrap()
    }

    #[test]
    fn points_carry_what_changed_and_add_up_to_the_counts() {
        let c = |name| column(&COUNTS, name);
        let mut fleet = FleetCounts::new(&COUNTS, 60, 1_000);
        let mut feed = FleetCounts::new(&FEED, 60, 1_000);
        assert!(fleet.due(1_000), "the first request writes one");
        let first = fleet.point(&sample(3, 2, 1 << 20, 1_500));
        assert_eq!((first[c("requests")], first[c("edge_no")]), (3.0, 2.0));
        assert_eq!(first[c("span_ms")], 500.0);
        assert!(!fleet.due(60_000) && fleet.due(61_500), "then one a minute");
        let second = fleet.point(&sample(10, 2, 2 << 20, 61_500));
        assert_eq!((second[c("requests")], second[c("edge_no")]), (7.0, 0.0), "deltas");
        assert_eq!(second[c("wasm_bytes")], f64::from(2 << 20), "a gauge is the level now");
        assert_eq!(second[c("held_bytes")], 7.0);
        assert_eq!(first[c("span_ms")] + second[c("span_ms")], 60_500.0);
        let r = report(true, &fleet, &feed);
        assert_eq!((r.points, r.feed_points, r.sent["requests"], r.sent["edge_no"]), (2, 0, 10, 2));
        assert!(!r.sent.contains_key("wasm_bytes"), "gauges are not summed");
        assert!(!r.sent.contains_key("feed_no"), "no feed point written");
        let f = feed.point(&sample(10, 2, 0, 61_500));
        assert_eq!(f[column(&FEED, "feed_no")], 2.0);
        let r = report(true, &fleet, &feed);
        assert_eq!((r.feed_points, r.sent["feed_no"], r.sent["span_ms"]), (1, 2, 60_500));
    }

    #[test]
    fn a_refused_write_carries_its_deltas_into_the_next_point() {
        let c = |name| column(&COUNTS, name);
        let (mut fleet, feed) = (FleetCounts::new(&COUNTS, 1, 0), FleetCounts::new(&FEED, 1, 0));
        let lost = fleet.point(&sample(4, 1, 0, 10));
        fleet.refused(&lost);
        assert!(!fleet.due(500) && fleet.due(1_010), "tried again an interval later");
        let next = fleet.point(&sample(5, 1, 0, 1_100));
        assert_eq!((next[c("requests")], next[c("edge_no")]), (5.0, 1.0));
        let r = report(true, &fleet, &feed);
        assert_eq!((r.points, r.refused, r.sent["requests"]), (1, 1, 5));
        let unbound = fleet.point(&sample(9, 1, 0, 2_200));
        fleet.unbound(&unbound);
        let r = report(false, &fleet, &feed);
        assert_eq!((r.points, r.refused, r.sent["requests"]), (1, 1, 5), "nothing sent, nothing refused");
    }

    #[test]
    fn the_operations_guide_names_every_column_where_it_is() {
        let guide = include_str!("../../docs/operations.md");
        for layout in [&COUNTS, &FEED] {
            assert!(layout.columns.len() <= 20, "Analytics Engine takes 20 doubles a point");
            for (i, Column { name, kind, .. }) in layout.columns.iter().enumerate() {
                let kind = match kind {
                    Kind::Delta => "count",
                    Kind::Gauge => "level",
                };
                let row = format!("| `{}` | `double{}` | `{name}` | {kind} |", layout.format, i + 1);
                assert!(guide.contains(&row), "docs/operations.md lacks the row {row}");
            }
        }
        assert!(guide.contains(BINDING));
    }
}
