//! One bench run as its configuration asks: the side-by-side targets and the sweep
//! ([`crate::side_by_side`], [`crate::sweep`]), then the writes A/B ([`crate::writes_ab`]); and
//! that configuration. Every target sees the same seeded workload.

use crate::report::{BenchReport, Machine};
use crate::servers::{Launch, OriginSettings};
use crate::side_by_side::run_side_by_side;
use crate::writes_ab::{self, run_writes, WritesConfig};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

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
    /// Keyspace.
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

/// Runs everything `cfg` asks for and returns the report.
pub async fn run_bench(cfg: &BenchConfig) -> anyhow::Result<BenchReport> {
    let started = Instant::now();
    let mut report = if cfg.side_by_side { run_side_by_side(cfg).await? } else { writes_only_report(cfg) };
    if let Some(w) = &cfg.writes {
        match run_writes(cfg, w).await {
            Ok(writes) => {
                report.checks.extend(writes_ab::checks(&writes));
                report.writes = Some(writes);
            }
            // Alone, its failure is the run's; after the side-by-side run, it must not lose it.
            Err(e) if !cfg.side_by_side => return Err(e),
            Err(e) => {
                eprintln!("[loadgen] writes A/B failed: {e:#}");
                report.writes_error = Some(format!("{e:#}"));
            }
        }
    }
    report.wall_seconds = started.elapsed().as_secs_f64();
    Ok(report)
}

/// The report of a run without the side-by-side targets: the writes A/B fills it in.
fn writes_only_report(cfg: &BenchConfig) -> BenchReport {
    let mut settings = BTreeMap::new();
    settings.insert("seed".to_owned(), cfg.seed.to_string());
    settings.insert("targets".to_owned(), "writes A/B only".to_owned());
    BenchReport {
        command: cfg.command.clone(),
        machine: Machine::describe(),
        settings,
        targets: Vec::new(),
        sweep: Vec::new(),
        sweep_error: None,
        checks: Vec::new(),
        filter_stats: BTreeMap::new(),
        writes: None,
        writes_error: None,
        wall_seconds: 0.0,
    }
}
