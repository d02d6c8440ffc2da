//! What an edge isolate reports about itself (`GET /_bloomgate/isolate`, edge secret): its wasm
//! memory, what it holds against its budget, what it did and the CPU that took.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One isolate's memory, holdings, counts and CPU, since it started.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct IsolateReport {
    /// Bytes of wasm linear memory (pages × 64 KiB): what the worker's Rust side has grown to.
    /// It never shrinks; the isolate's JavaScript heap is not in it.
    pub wasm_bytes: u64,
    /// Most bytes held between requests (`EDGE_MAX_HELD_BYTES`).
    pub budget_bytes: u64,
    /// What is held now.
    pub held: HeldBytes,
    /// What the isolate did.
    pub counts: IsolateCounts,
    /// CPU time spent, by kind of work.
    pub cpu: CpuSpent,
    /// Whether the Cache API tier is in use (`CACHE_API`).
    pub cache_api: bool,
    /// Milliseconds since the isolate's first request.
    pub uptime_ms: u64,
    /// The points it wrote to the fleet's Analytics Engine dataset. Read as unbound from older
    /// edges, which do not send it.
    #[serde(default)]
    pub fleet: FleetPoints,
}

/// An isolate's data points for the fleet (docs/operations.md, "The edge fleet's counts").
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FleetPoints {
    /// Whether the worker has the dataset bound (`EDGE_COUNTS`); unbound, nothing is written.
    pub bound: bool,
    /// The points' layout (their `blob1`).
    pub format: String,
    /// Seconds between the isolate's points (`FLEET_POINT_SECS`).
    pub every_secs: u64,
    /// Points of the counts written.
    pub points: u64,
    /// Points of the shared feed's counts written (beside those, when it is followed).
    #[serde(default)]
    pub feed_points: u64,
    /// Writes the binding refused (their counts went into the next point).
    pub refused: u64,
    /// What the written points' counting columns add up to, by column name: the isolate's
    /// counts as of its last point.
    pub sent: BTreeMap<String, u64>,
}

/// What an isolate holds between requests, in bytes and counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeldBytes {
    /// Everything below, in bytes: what the budget bounds.
    pub total: u64,
    /// Filter segment copies.
    pub segments: u64,
    /// How many copies.
    pub segment_count: u64,
    /// Spare segment buffers, kept for the next segment of their size.
    pub spare_buffers: u64,
    /// How many spares.
    pub spare_count: u64,
    /// Journal tails (key hashes added since a position, by segment).
    pub journal_tails: u64,
    /// Key hashes in them.
    pub tail_hashes: u64,
    /// Manifests (estimated).
    pub manifests: u64,
    /// How many manifests.
    pub manifest_count: u64,
}

/// Counts since the isolate started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IsolateCounts {
    /// Requests served.
    pub requests: u64,
    /// Single lookups answered "not seen" at the edge.
    pub edge_no: u64,
    /// Single lookups forwarded to the origin.
    pub forwarded: u64,
    /// Batch lookups.
    pub batches: u64,
    /// Keys in them.
    pub batch_keys: u64,
    /// Of those, keys the origin was asked about.
    pub batch_keys_forwarded: u64,
    /// Cache API reads (`cache.match`).
    pub cache_reads: u64,
    /// Of those, reads that found a segment.
    pub cache_hits: u64,
    /// Of `cache_reads`, entries found but refused as not the edge's own (no entry header,
    /// another format, a length that does not add up, a MAC that does not verify under the key
    /// derived from the edge secret), each then read as a miss. Read as 0 from older edges,
    /// which do not send it.
    #[serde(default)]
    pub cache_refused: u64,
    /// Segments put in the Cache API after a fetch from the origin.
    pub cache_puts: u64,
    /// Copies put back in the Cache API after the journal brought them forward.
    pub cache_write_backs: u64,
    /// Manifests fetched from the origin.
    pub origin_manifests: u64,
    /// Segments fetched from the origin.
    pub origin_segments: u64,
    /// Journal chunks fetched from the origin.
    pub origin_journal: u64,
    /// Body bytes of those manifests, segments and chunks.
    pub origin_bytes: u64,
    /// Copies brought forward from the isolate's own journal tail.
    pub local_catch_ups: u64,
    /// Copies dropped because their filter moved to another generation.
    pub dropped_by_switch: u64,
    /// Segment buffers reused from the spares.
    pub buffers_reused: u64,
    /// Segment buffers newly allocated.
    pub buffers_allocated: u64,
    /// Of `edge_no`, answered from the shared feed's copy (`SHARED_FEED`). Read as 0 from
    /// older edges, as are the two below.
    #[serde(default)]
    pub feed_no: u64,
    /// Requests of the shared feed (current documents, segments at an epoch, sealed pages),
    /// through the CDN's cache; their bytes are in `origin_bytes`.
    #[serde(default)]
    pub feed_requests: u64,
    /// Times a follower of the shared feed fell back to the isolate's own path.
    #[serde(default)]
    pub feed_fallbacks: u64,
}

/// CPU time by kind of work, from the isolate's clock around work that does no I/O. Under
/// `workerd` run locally (`wrangler dev`) that clock moves in whole milliseconds while code
/// runs, so sums over many operations are unbiased; deployed Workers stop it between I/O, so
/// there these read zero.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CpuSpent {
    /// Single lookups answered "not seen" at the edge, whole handler.
    pub edge_no: CpuFigure,
    /// Single lookups forwarded, the handler less the wait for the origin.
    pub forwarded: CpuFigure,
    /// Keys of batch lookups, the handler less waits, per key.
    pub batch_key: CpuFigure,
    /// Journal chunks taken into the tail, and the copies brought forward by them.
    pub catch_up: CpuFigure,
    /// Segments verified on arrival (from the Cache API or the origin).
    pub segment_decode: CpuFigure,
}

/// How often some work ran and the time it took in all.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CpuFigure {
    /// How many times.
    pub count: u64,
    /// Milliseconds in all.
    pub total_ms: f64,
    /// Runs left out of both: work that takes microseconds but measured two milliseconds or
    /// more was descheduled meanwhile (the clock is wall time).
    #[serde(default)]
    pub set_aside: u64,
}

impl CpuFigure {
    /// Adds one run of `ms` (or of `units` things, for work counted per key).
    pub fn add(&mut self, units: u64, ms: f64) {
        self.count += units;
        self.total_ms += ms.max(0.0);
    }

    /// Adds one run of `ms` that should take well under a millisecond, setting it aside if it
    /// measured two or more.
    pub fn add_short(&mut self, units: u64, ms: f64) {
        if ms >= 2.0 {
            self.set_aside += units;
        } else {
            self.add(units, ms);
        }
    }

    /// Microseconds per run; None before any.
    pub fn us_each(&self) -> Option<f64> {
        (self.count > 0).then(|| self.total_ms * 1000.0 / self.count as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_round_trips_and_figures_divide() {
        let mut cpu = CpuSpent::default();
        cpu.edge_no.add(1, 0.0);
        cpu.edge_no.add(3, 1.0);
        assert_eq!(cpu.edge_no.us_each(), Some(250.0));
        cpu.edge_no.add_short(1, 3.0);
        assert_eq!((cpu.edge_no.us_each(), cpu.edge_no.set_aside), (Some(250.0), 1), "a descheduled run is set aside");
        assert_eq!(CpuFigure::default().us_each(), None);
        let report = IsolateReport { wasm_bytes: 1 << 20, cpu, ..IsolateReport::default() };
        let text = serde_json::to_string(&report).unwrap();
        assert!(text.contains(r#""wasm_bytes":1048576"#), "{text}");
        assert_eq!(serde_json::from_str::<IsolateReport>(&text).unwrap(), report);
        let without_refusals = text.replace(r#""cache_refused":0,"#, "");
        assert_ne!(without_refusals, text);
        assert_eq!(serde_json::from_str::<IsolateReport>(&without_refusals).unwrap(), report, "read with its default");
    }
}
