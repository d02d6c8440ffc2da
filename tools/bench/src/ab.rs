//! Side-by-side rounds of the negative path: servers measured in alternation, each round a
//! run of lookups of keys never stored, with the server's own CPU, its Redis's and the load
//! generator's per lookup. This machine is shared and noisy: alternating rounds put the same
//! noise on every target, and medians over rounds are what get compared.

use crate::counters::Samples;
use crate::cpu::{machine_steal_seconds, CpuGroup};
use crate::driver::{drive, DriveSpec};
use crate::filters::{self, FilterSpec};
use crate::servers::{cores, Server};
use crate::stats::median;
use crate::workload::Workload;
use anyhow::Context as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// The arguments every A/B binary takes (`#[command(flatten)]`).
#[derive(clap::Args, Debug)]
pub struct AbArgs {
    /// Keys stored in each origin's filter before measuring.
    #[arg(long, default_value_t = 100_000)]
    pub keys: usize,
    /// Rounds; each measures every target once, alternating.
    #[arg(long, default_value_t = 5)]
    pub rounds: usize,
    /// Seconds of each measured run.
    #[arg(long, default_value_t = 10)]
    pub duration: u64,
    /// The origin binary.
    #[arg(long, default_value = "target/release/bloomgate-origin")]
    pub origin_bin: PathBuf,
    /// The single Redis (`host:port`).
    #[arg(long, default_value = "127.0.0.1:6399")]
    pub redis: String,
    /// Where to write the results as JSON.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// One server under measurement, with the processes whose CPU it costs.
pub struct AbTarget {
    /// Name in reports.
    pub name: String,
    /// The server.
    pub server: Server,
    /// Filter the lookups ask (any name for a server that keeps none).
    pub filter: String,
    /// The server's processes.
    pub server_cpu: CpuGroup,
    /// The Redis processes behind it (none for the floor).
    pub redis_cpu: CpuGroup,
}

/// What one measured run gave.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct AbRun {
    /// Lookups answered per second.
    pub rate: f64,
    /// Server CPU per lookup, µs.
    pub server_us: f64,
    /// Redis CPU per lookup, µs.
    pub redis_us: f64,
    /// The load generator's CPU per lookup, µs.
    pub loadgen_us: f64,
    /// Median latency, ms.
    pub p50_ms: f64,
    /// 90th percentile latency, ms.
    pub p90_ms: f64,
    /// 99th percentile latency, ms (from when each request was due, at a fixed rate).
    pub p99_ms: f64,
    /// 99.9th percentile latency, ms.
    pub p999_ms: f64,
    /// The median over the run's one-second windows of each window's 99th percentile, ms: the
    /// tail of a typical second, which a few seconds of host noise do not move (the p99 of the
    /// whole run takes them in).
    pub p99_window_median_ms: f64,
    /// Of the run's lookups, the share its local copy answered (NaN: the server keeps none or
    /// does not say).
    pub copy_answered_share: f64,
    /// Lookups the local copy answered per read-barrier round ended in the run: the
    /// amortisation of the barrier's Redis round trips.
    pub lookups_per_round: f64,
    /// Local copies loaded (or reloaded) during the run.
    pub copy_loads: f64,
    /// Of the run's lookups, the share answered "no" from the local copy's memory under its read
    /// lease (no Redis call).
    pub lease_share: f64,
    /// Redis calls the origin made for lookups per lookup: its copies' journal reads (barrier
    /// rounds and the background reads that keep leases) and its direct filter reads.
    pub redis_calls_per_lookup: f64,
    /// The copies' background journal reads per second of the run.
    pub tail_reads_per_sec: f64,
    /// The server's context switches per lookup (all its threads).
    pub server_switches: f64,
    /// The load generator's context switches per lookup.
    pub loadgen_switches: f64,
    /// Of the run's wall time, the share the hypervisor gave this machine's CPUs to other guests
    /// while they wanted to run, per CPU (`steal`): how contended the host was.
    pub steal_share: f64,
}

/// How each run drives its target.
#[derive(Clone, Copy, Debug)]
pub struct AbLoad {
    /// Connections, each with one request in flight.
    pub connections: usize,
    /// Length of a run.
    pub duration: Duration,
    /// Lookups per second; None = closed loop, as fast as answers come.
    pub rate: Option<f64>,
}

/// Creates a filter of `keys.len() × 2` capacity on the origin at `base` and stores `keys` in it
/// (batches refused as retryable are retried, as a fresh Cassandra may refuse the first ones);
/// its name.
pub async fn preload(name: &str, base: &str, keys: &Arc<Vec<String>>) -> anyhow::Result<String> {
    let filter = format!("ab-{:08x}", rand::random::<u32>());
    let spec = FilterSpec { name: &filter, fp_rate: 0.01, capacity: keys.len() as u64 * 2, segment_bytes: None };
    filters::preload(base, &spec, keys, false).await.with_context(|| format!("preload {name}"))?;
    Ok(filter)
}

/// Drops the filter each origin target preloaded, with its keys (floors and controls have none
/// of their own), after the results are written: a run leaves the bench keyspace as it found
/// it, so a series' origins never list, check and recover the filters of the runs before.
pub async fn drop_preloaded(targets: &[AbTarget]) -> anyhow::Result<()> {
    for target in targets.iter().filter(|t| t.filter.starts_with("ab-")) {
        filters::drop_with_keys(&target.server.base, &target.filter).await?;
    }
    Ok(())
}

impl AbTarget {
    /// A floor (the hello-world) as a target named `name`: no filter, no Redis behind it.
    pub fn floor(name: &str, server: Server) -> AbTarget {
        let server_cpu = CpuGroup { name: name.into(), pids: vec![server.pid] };
        let redis_cpu = CpuGroup { name: "redis".into(), pids: Vec::new() };
        AbTarget { name: name.into(), server, filter: "floor".into(), server_cpu, redis_cpu }
    }

    /// An origin as a target: its filter preloaded with `keys`, its CPU and that of `redis_pids`
    /// measured.
    pub async fn origin(
        name: &str,
        server: Server,
        redis_pids: Vec<u32>,
        keys: &Arc<Vec<String>>,
    ) -> anyhow::Result<AbTarget> {
        anyhow::ensure!(!redis_pids.is_empty(), "no redis-server process found for the {name} target");
        let filter = preload(name, &server.base, keys).await?;
        let server_cpu = CpuGroup { name: name.into(), pids: vec![server.pid] };
        let redis_cpu = CpuGroup { name: "redis".into(), pids: redis_pids };
        Ok(AbTarget { name: name.into(), server, filter, server_cpu, redis_cpu })
    }
}

/// One run against `target`; fails on any error answer (a benchmark of failures measures
/// nothing).
pub async fn measure(target: &AbTarget, load: AbLoad, workload: &Workload, label: String) -> anyhow::Result<AbRun> {
    let spec = DriveSpec {
        label,
        base: target.server.base.clone(),
        filter: target.filter.clone(),
        connections: load.connections,
        duration: Some(load.duration),
        max_lookups: None,
        rate: load.rate,
        progress: false,
    };
    let loadgen = CpuGroup { name: "loadgen".into(), pids: vec![std::process::id()] };
    // Scraped outside the CPU window; a server without `/metrics` (the floor) gives None.
    let http = reqwest::Client::new();
    let counters_before = Samples::scrape(&http, &target.server.base).await.ok();
    let switches = || [target.server_cpu.context_switches(), loadgen.context_switches()];
    let (switches_before, steal_before) = (switches(), machine_steal_seconds().unwrap_or(f64::NAN));
    let before = [target.server_cpu.seconds(), target.redis_cpu.seconds(), loadgen.seconds()];
    let stats = drive(&spec, workload).await?;
    let after = [target.server_cpu.seconds(), target.redis_cpu.seconds(), loadgen.seconds()];
    let (switches_after, steal_after) = (switches(), machine_steal_seconds().unwrap_or(f64::NAN));
    let counters_after = Samples::scrape(&http, &target.server.base).await.ok();
    anyhow::ensure!(stats.errors.total() == 0, "{}: errors {:?}", target.name, stats.errors);
    let lookups = (stats.lookups as f64).max(1.0);
    let per_lookup_us = |i: usize| (after[i] - before[i]) * 1e6 / lookups;
    Ok(AbRun {
        rate: stats.rate(),
        server_us: per_lookup_us(0),
        redis_us: per_lookup_us(1),
        loadgen_us: per_lookup_us(2),
        p50_ms: stats.quantile_ms(0.5),
        p90_ms: stats.quantile_ms(0.9),
        p99_ms: stats.quantile_ms(0.99),
        p999_ms: stats.quantile_ms(0.999),
        p99_window_median_ms: median(stats.window_quantiles_ms(0.99)).unwrap_or(f64::NAN),
        server_switches: (switches_after[0] - switches_before[0]) / lookups,
        loadgen_switches: (switches_after[1] - switches_before[1]) / lookups,
        steal_share: (steal_after - steal_before) / (load.duration.as_secs_f64() * cores() as f64),
        ..copy_figures(counters_before.as_ref(), counters_after.as_ref(), lookups, load.duration.as_secs_f64())
    })
}

/// What the server's local copy did in a run, from its counters before and after (NaN where a
/// server does not say).
fn copy_figures(before: Option<&Samples>, after: Option<&Samples>, lookups: f64, secs: f64) -> AbRun {
    let (Some(before), Some(after)) = (before, after) else {
        return AbRun {
            copy_answered_share: f64::NAN,
            lookups_per_round: f64::NAN,
            copy_loads: f64::NAN,
            lease_share: f64::NAN,
            redis_calls_per_lookup: f64::NAN,
            tail_reads_per_sec: f64::NAN,
            ..AbRun::default()
        };
    };
    let delta = |sample: &str| after.delta(before, sample);
    let answered = delta("bloomgate_local_copy_lookups_total{outcome=\"answered\"}");
    let rounds = delta("bloomgate_local_copy_rounds_total{result=\"current\"}")
        + delta("bloomgate_local_copy_rounds_total{result=\"failed\"}");
    let tails = delta("bloomgate_local_copy_tail_reads_total{result=\"current\"}")
        + delta("bloomgate_local_copy_tail_reads_total{result=\"failed\"}");
    let asked_redis = delta("bloomgate_filter_reads_total{via=\"redis\"}");
    AbRun {
        copy_answered_share: answered / lookups,
        lookups_per_round: if rounds > 0.0 { answered / rounds } else { f64::NAN },
        copy_loads: delta("bloomgate_local_copy_loads_total{result=\"loaded\"}"),
        lease_share: delta("bloomgate_filter_reads_total{via=\"lease\"}") / lookups,
        redis_calls_per_lookup: (rounds + asked_redis) / lookups,
        tail_reads_per_sec: tails / secs.max(f64::MIN_POSITIVE),
        ..AbRun::default()
    }
}

/// The median of one figure over runs (0 when there are none).
pub fn median_of(runs: &[AbRun], figure: fn(&AbRun) -> f64) -> f64 {
    median(runs.iter().map(figure).collect()).unwrap_or(0.0)
}

/// The median of a figure some servers do not report (NaN when none of the runs has it).
fn median_or_nan(runs: &[AbRun], figure: fn(&AbRun) -> f64) -> f64 {
    median(runs.iter().map(figure).collect()).unwrap_or(f64::NAN)
}

/// The medians of every figure over runs.
pub fn medians(runs: &[AbRun]) -> AbRun {
    AbRun {
        rate: median_of(runs, |r| r.rate),
        server_us: median_of(runs, |r| r.server_us),
        redis_us: median_of(runs, |r| r.redis_us),
        loadgen_us: median_of(runs, |r| r.loadgen_us),
        p50_ms: median_of(runs, |r| r.p50_ms),
        p90_ms: median_of(runs, |r| r.p90_ms),
        p99_ms: median_of(runs, |r| r.p99_ms),
        p999_ms: median_of(runs, |r| r.p999_ms),
        p99_window_median_ms: median_of(runs, |r| r.p99_window_median_ms),
        copy_answered_share: median_or_nan(runs, |r| r.copy_answered_share),
        lookups_per_round: median_or_nan(runs, |r| r.lookups_per_round),
        copy_loads: median_or_nan(runs, |r| r.copy_loads),
        lease_share: median_or_nan(runs, |r| r.lease_share),
        redis_calls_per_lookup: median_or_nan(runs, |r| r.redis_calls_per_lookup),
        tail_reads_per_sec: median_or_nan(runs, |r| r.tail_reads_per_sec),
        server_switches: median_of(runs, |r| r.server_switches),
        loadgen_switches: median_of(runs, |r| r.loadgen_switches),
        steal_share: median_or_nan(runs, |r| r.steal_share),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copy_figures_are_what_the_run_added_to_the_counters() {
        let before = Samples::parse(
            "bloomgate_local_copy_lookups_total{outcome=\"answered\"} 100\n\
             bloomgate_local_copy_rounds_total{result=\"current\"} 10\n\
             bloomgate_local_copy_loads_total{result=\"loaded\"} 1\n",
        );
        let after = Samples::parse(
            "bloomgate_local_copy_lookups_total{outcome=\"answered\"} 900\n\
             bloomgate_local_copy_rounds_total{result=\"current\"} 205\n\
             bloomgate_local_copy_rounds_total{result=\"failed\"} 5\n\
             bloomgate_local_copy_loads_total{result=\"loaded\"} 2\n\
             bloomgate_local_copy_tail_reads_total{result=\"current\"} 50\n\
             bloomgate_filter_reads_total{via=\"lease\"} 600\n\
             bloomgate_filter_reads_total{via=\"redis\"} 10\n",
        );
        let run = copy_figures(Some(&before), Some(&after), 1000.0, 10.0);
        assert_eq!(run.copy_answered_share, 0.8, "800 of the run's 1,000 lookups");
        assert_eq!(run.lookups_per_round, 4.0, "800 answers over 200 rounds, failed ones included");
        assert_eq!(run.copy_loads, 1.0);
        assert_eq!(run.lease_share, 0.6);
        assert_eq!(run.redis_calls_per_lookup, 0.21, "200 rounds and 10 direct reads over 1,000 lookups");
        assert_eq!(run.tail_reads_per_sec, 5.0);
        let floor = copy_figures(None, Some(&after), 1000.0, 10.0);
        assert!(
            floor.copy_answered_share.is_nan() && floor.lookups_per_round.is_nan(),
            "a server without counters says nothing"
        );
        let median = medians(&[floor, floor]);
        assert!(median.copy_answered_share.is_nan(), "not a 0 % share");
    }
}
