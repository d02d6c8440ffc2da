//! What a bench run is asked to do: the side-by-side targets' settings, the sweep's and the
//! writes A/B's. The binaries fill it in from their flags; every part of a run reads it.

use crate::servers::{Launch, OriginSettings};
use std::time::Duration;

/// The sweep of miss share × fp_rate against theory.
#[derive(Clone, Debug)]
pub struct SweepConfig {
    /// Present keys of each sweep filter (one filter per fp_rate).
    pub present: usize,
    /// Filters' false-positive rates.
    pub fp_rates: Vec<f64>,
    /// Miss shares.
    pub miss_shares: Vec<f64>,
    /// Lookups per point.
    pub lookups: u64,
    /// Segment size of the sweep filters: small segments size a small filter close to its
    /// fp_rate (a filter is whole segments, so a 64 KiB default would over-size it).
    pub segment_bytes: Option<u64>,
}

/// Everything a run needs.
#[derive(Clone, Debug)]
pub struct BenchConfig {
    /// Seeds keys and streams.
    pub seed: u64,
    /// Present keys preloaded into the main filter (its capacity too).
    pub present: usize,
    /// The main filter's false-positive rate.
    pub fp_rate: f64,
    /// Filters are created for `keys × capacity_headroom` (≥ 1).
    pub capacity_headroom: f64,
    /// Segment size of the main filter (`None` = the origin's default, 64 KiB). A filter is
    /// whole segments, so at 10⁵ keys 64 KiB segments over-size it (lower FPR than asked).
    pub segment_bytes: Option<u64>,
    /// Share of lookups for absent keys in the mixed runs.
    pub miss_share: f64,
    /// Zipf exponent of the hits.
    pub zipf_s: f64,
    /// Connections per run.
    pub connections: usize,
    /// Length of each measured run.
    pub duration: Duration,
    /// Unmeasured run before each measured one (connections, caches, JIT, edge segments).
    pub warmup: Duration,
    /// Also run the negatives at half of their measured maximum rate (p99 target).
    pub half_rate: bool,
    /// Run the edge with this freshness bound S (seconds); `None` = no edge.
    pub edge_freshness_secs: Option<u32>,
    /// How the origins run.
    pub origin: Launch,
    /// How the floor runs.
    pub floor: Launch,
    /// `redis://host:port/`.
    pub redis_url: String,
    /// Cassandra `host:port`.
    pub cassandra: String,
    /// The Cassandra keyspace the run writes to.
    pub keyspace: String,
    /// The sweep, if any.
    pub sweep: Option<SweepConfig>,
    /// Connections for the edge (wrangler dev), `None` = `connections`.
    pub edge_connections: Option<usize>,
    /// Length of the edge's measured run, `None` = `duration` (wrangler dev is slow: a longer
    /// run gives a steadier hit share, and so a steadier origin-requests figure).
    pub edge_duration: Option<Duration>,
    /// Before each measured run, wait up to this long for the rest of the machine to go quiet
    /// (other processes using under half a core over one second).
    pub quiet_wait: Duration,
    /// Progress bars and step lines on stderr.
    pub progress: bool,
    /// Measure the side-by-side targets (floor, baseline, filter, edge) and the
    /// sweep (if asked); `false` = only the writes A/B.
    pub side_by_side: bool,
    /// The writes A/B (edge freshness and bytes per write, journal on and off).
    pub writes: Option<WritesConfig>,
    /// How this run was started, for the report.
    pub command: String,
}

impl BenchConfig {
    /// A step line on stderr, with progress on.
    pub(crate) fn step(&self, msg: &str) {
        if self.progress {
            eprintln!("[loadgen] {msg}");
        }
    }

    /// An origin on this run's Redis, Cassandra and keyspace.
    pub(crate) fn origin_settings(&self, filter_enabled: bool, journal_enabled: bool) -> OriginSettings {
        OriginSettings {
            redis_url: self.redis_url.clone(),
            redis_cluster_nodes: Vec::new(),
            cassandra: self.cassandra.clone(),
            keyspace: self.keyspace.clone(),
            filter_enabled,
            journal_enabled,
            extra_env: Vec::new(),
        }
    }

    /// Filters get headroom over the `keys` they hold: the origin resizes (rebuilds at double
    /// capacity) a filter whose *estimated* key count passes its capacity, and at exactly full
    /// the estimate's noise trips that about half the time.
    pub(crate) fn capacity_for(&self, keys: f64) -> u64 {
        (keys * self.capacity_headroom).ceil() as u64
    }
}

/// The write A/B's settings (the seed, fp_rate, miss share, services and S come from
/// [`BenchConfig`]).
#[derive(Clone, Debug)]
pub struct WritesConfig {
    /// Keys written per second, W.
    pub rate: f64,
    /// Connections the writes go over.
    pub writers: usize,
    /// Keys preloaded into each side's filter.
    pub present: usize,
    /// Segment size of those filters; `None` = the origin's default (64 KiB), what edges fetch.
    pub segment_bytes: Option<u64>,
    /// Lookups per second at the front (fixed, the same for both sides); 0 = closed loop.
    pub lookup_rate: f64,
    /// Connections the lookups go over.
    pub lookup_connections: usize,
    /// Measured time of each side's front run.
    pub duration: Duration,
    /// Lookups and writes before it, unmeasured (the edge fetches its segments).
    pub warmup: Duration,
    /// Writes-only phase against the origin before each front run; zero = none.
    pub origin_duration: Duration,
    /// A/B pairs, alternating which side goes first.
    pub rounds: usize,
    /// Follow one acknowledged key in this many.
    pub probe_every: u64,
    /// Time between two lookups of a followed key.
    pub probe_interval: Duration,
    /// Followed for S plus this long before it counts as never seen.
    pub probe_margin: Duration,
    /// The filters of an earlier A/B run with the same seed and `present` (journal side, then
    /// no-journal side) to measure again instead of preloading new ones: another write rate on
    /// the same filters, without an hour of preload on this machine.
    pub reuse_filters: Option<[String; 2]>,
    /// Only the journal side (no origin, filter or runs without the journal).
    pub journal_only: bool,
    /// The filters' capacity, instead of what the preload and the writes need (a filter larger
    /// than the edge isolate's budget, whatever it holds).
    pub capacity: Option<u64>,
    /// More settings of the edge worker (`--var NAME:value`), e.g. `EDGE_MAX_HELD_BYTES`.
    pub edge_vars: Vec<(String, String)>,
}
