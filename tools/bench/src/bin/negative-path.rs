//! The origin's cost per "no" against an axum hello-world, in one run: the floor
//! (`bloomgate-loadgen floor`: same route, a 404, no work), and `bloomgate-origin` processes
//! that differ in one setting each (by default: local copies behind the read barrier alone, and
//! under read leases, the default), all on the same Redis and Cassandra with the same filter
//! size.
//!
//! Rounds alternate between the targets, each a closed-loop run of lookups of keys never stored
//! (every answer a "no"); then, for the p99 target, each is run at a fixed rate of half its own
//! median maximum (the floor at half *its* rate is the control: what this machine's scheduling
//! alone does to a tail). Printed: medians of throughput and its ratio to the floor, CPU per
//! "no" of the server, of Redis and of the load generator, and p50/p99; and each target's
//! *paired* ratio to the floor (the median over rounds of the ratio to the floor's run in the
//! same round: neighbouring runs share the machine's mood). Each round starts one target later
//! than the one before, so no target always runs right after another. With `--floor-control` a
//! second, identical floor runs as a target too: its paired ratios are what two identical
//! servers differ by on this machine, the yardstick for every other ratio. With
//! `--stack-control` an origin with default settings is also asked about a filter that was never
//! created (`origin-stack`): every lookup is answered 404 from its cache of definitions, through
//! the same route, extractors and layers, with no store read: what the origin's HTTP stack costs
//! without the filter, its Redis round trips and its read barrier.
//!
//! Around every run it also reads each origin's counters (the share of lookups its local copy
//! answered, and answered from memory under its read lease, lookups per barrier round, Redis
//! calls per lookup, the copies' background journal reads per second, copies loaded), the
//! context switches per lookup of the server and of the load generator, and the host's steal
//! time: a slow round then says whether the origin did more work in it or the same work ran on
//! a slower host.
//!
//! With `--writes N`, each origin then takes N writes of fresh keys, one at a time, in
//! alternating rounds: the latency a read lease adds to a write (its wait, overlapped with the
//! database write). Last (`--idle-secs`), every origin is left alone and the Redis calls it
//! makes for the filter it holds are counted: what a held filter costs Redis at rest.
//!
//! ```sh
//! scripts/services start
//! cargo build --release -p bloomgate-origin -p bloomgate-bench \
//!   --bin bloomgate-origin --bin bloomgate-loadgen --bin negative-path
//! target/release/negative-path --keys 100000 --rounds 5 --duration 10 --writes 200
//! ```

use bloomgate_bench::ab::{drop_preloaded, measure, medians, AbArgs, AbLoad, AbRun, AbTarget};
use bloomgate_bench::cpu::CpuGroup;
use bloomgate_bench::lease_costs::{redis_calls_per_sec, write_run, WriteRun};
use bloomgate_bench::servers::{start_floor, start_origin, Launch, OriginSettings};
use bloomgate_bench::stats::median;
use bloomgate_bench::workload::{present_keys, Workload};
use bloomgate_tests::procs::pids_matching;
use clap::Parser;
use serde_json::json;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

#[derive(Parser)]
/// The origin's negative path against an axum hello-world, side by side.
struct Args {
    #[command(flatten)]
    ab: AbArgs,
    /// Connections, each with one request in flight.
    #[arg(long, default_value_t = 64)]
    connections: usize,
    /// Skip the half-rate runs (p99).
    #[arg(long)]
    no_half_rate: bool,
    /// Instead of the closed loop and the half rates: run every target at this one fixed rate
    /// (lookups per second), to compare tails under the same traffic rather than at the same
    /// share of each target's own maximum.
    #[arg(long)]
    same_rate: Option<f64>,
    /// Also run a second, identical floor (`floor-again`) as a target: the noise yardstick.
    #[arg(long)]
    floor_control: bool,
    /// Also run `origin-stack`: lookups of a filter never created, answered by an origin without
    /// reading any store (the origin's HTTP stack alone).
    #[arg(long)]
    stack_control: bool,
    /// An origin target: `NAME[:BLOOMGATE_SETTING=VALUE[,...]][@BINARY]` (another binary, e.g. a
    /// build of the commit before, for an A/B of code); repeat for more. Default:
    /// `barrier:BLOOMGATE_READ_CONSISTENCY=barrier` and `lease`.
    #[arg(long = "origin")]
    origins: Vec<String>,
    /// Writes per origin and round after the lookups (0: none): write latency side by side.
    #[arg(long, default_value_t = 0)]
    writes: usize,
    /// Pause after each write, ms.
    #[arg(long, default_value_t = 20)]
    write_gap_ms: u64,
    /// Seconds each origin is left without lookups, at the end, while its Redis calls are
    /// counted (after 3 s of rest: a copy keeps reading its journal often for 2 s after its last
    /// lookup); 0: not measured.
    #[arg(long, default_value_t = 5)]
    idle_secs: u64,
    /// The load generator binary (serves the floor).
    #[arg(long, default_value = "target/release/bloomgate-loadgen")]
    loadgen_bin: PathBuf,
}

/// The filter `origin-stack` is asked about: never created, so its origin answers every lookup
/// from its cache of definitions.
const STACK_CONTROL_FILTER: &str = "never-created-stack-control";

/// An origin target as asked for on the command line.
struct OriginSpec {
    name: String,
    env: Vec<(String, String)>,
    binary: Option<PathBuf>,
}

/// `NAME[:K=V,K=V][@BINARY]`.
fn parse_origin(spec: &str) -> anyhow::Result<OriginSpec> {
    let (rest, binary) = match spec.rsplit_once('@') {
        Some((rest, binary)) => (rest, Some(PathBuf::from(binary))),
        None => (spec, None),
    };
    let (name, settings) = rest.split_once(':').unwrap_or((rest, ""));
    let env = settings
        .split(',')
        .filter(|s| !s.is_empty())
        .map(|kv| {
            let (k, v) = kv.split_once('=').ok_or_else(|| anyhow::anyhow!("{kv:?} in --origin {spec:?} is not K=V"))?;
            anyhow::ensure!(
                k.starts_with("BLOOMGATE_") || k == "TOKIO_WORKER_THREADS",
                "{k:?} in --origin {spec:?} is neither a BLOOMGATE_ setting nor TOKIO_WORKER_THREADS"
            );
            Ok((k.to_owned(), v.to_owned()))
        })
        .collect::<anyhow::Result<_>>()?;
    Ok(OriginSpec { name: name.to_owned(), env, binary })
}

/// The median over rounds of `metric`'s ratio to the floor's run in the same round.
fn paired_ratio(runs: &[AbRun], floor: &[AbRun], metric: fn(&AbRun) -> f64) -> f64 {
    median(runs.iter().zip(floor).map(|(r, f)| metric(r) / metric(f).max(f64::MIN_POSITIVE)).collect())
        .unwrap_or(f64::NAN)
}

/// The order targets run in, in round `round`: each round starts one target later.
fn round_order(targets: usize, round: usize) -> impl Iterator<Item = usize> {
    (0..targets).map(move |k| (k + round) % targets)
}

/// A metric a paired ratio column is taken of: its name, and how to read it from a run.
type PairedMetric<'a> = (&'a str, fn(&AbRun) -> f64);

/// One table row per target, with a paired ratio column per metric in `paired`.
fn print_table(title: &str, targets: &[AbTarget], runs: &[Vec<AbRun>], paired: &[PairedMetric]) {
    let floor_rate = medians(&runs[0]).rate;
    println!("\n{title}\n");
    let paired_heads: String = paired.iter().map(|(name, _)| format!(" paired {name} ÷ floor's |")).collect();
    println!("| target | no/s | × floor | server µs/no | Redis µs/no | server + Redis µs/no | loadgen µs/no | p50 ms | p90 ms | p99 ms | p99.9 ms | p99 of a typical second ms | answered by the copy | under the lease | lookups per barrier round | Redis calls per no | journal reads/s (tail) |{paired_heads}");
    println!(
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|{}",
        "---:|".repeat(paired.len())
    );
    for (target, target_runs) in targets.iter().zip(runs) {
        let m = medians(target_runs);
        let ratios: String = paired
            .iter()
            .map(|(_, metric)| format!(" {:.2} |", paired_ratio(target_runs, &runs[0], *metric)))
            .collect();
        println!(
            "| {} | {:.0} | {:.2} | {:.1} | {:.1} | {:.1} | {:.1} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {} | {} | {} | {} | {} |{ratios}",
            target.name,
            m.rate,
            m.rate / floor_rate.max(1.0),
            m.server_us,
            m.redis_us,
            m.server_us + m.redis_us,
            m.loadgen_us,
            m.p50_ms,
            m.p90_ms,
            m.p99_ms,
            m.p999_ms,
            m.p99_window_median_ms,
            percent_or_dash(m.copy_answered_share),
            percent_or_dash(m.lease_share),
            one_decimal_or_dash(m.lookups_per_round),
            three_decimals_or_dash(m.redis_calls_per_lookup),
            one_decimal_or_dash(m.tail_reads_per_sec),
        );
    }
}

/// `x` to three decimals; "–" for a server that does not report it.
fn three_decimals_or_dash(x: f64) -> String {
    if x.is_finite() {
        format!("{x:.3}")
    } else {
        "–".into()
    }
}

/// `share` as a percentage; "–" for a server that does not report it.
fn percent_or_dash(share: f64) -> String {
    if share.is_finite() {
        format!("{:.0} %", share * 100.0)
    } else {
        "–".into()
    }
}

/// `x` to one decimal; "–" for a server that does not report it.
fn one_decimal_or_dash(x: f64) -> String {
    if x.is_finite() {
        format!("{x:.1}")
    } else {
        "–".into()
    }
}

/// Runs every target once per round, alternating; the runs of each.
async fn rounds(
    targets: &[AbTarget],
    rounds: usize,
    load: impl Fn(usize) -> AbLoad,
    workload: &Workload,
    kind: &str,
) -> anyhow::Result<Vec<Vec<AbRun>>> {
    let mut runs = vec![Vec::new(); targets.len()];
    for round in 0..rounds {
        for i in round_order(targets.len(), round) {
            let target = &targets[i];
            let run = measure(target, load(i), workload, format!("{kind}-{}-{round}", target.name)).await?;
            eprintln!(
                "{kind} round {round} {:>18}: {:>8.0} no/s, server {:>5.1} + Redis {:>5.1} µs per no, loadgen {:>5.1} µs, p50/90/99/99.9 {:.2}/{:.2}/{:.2}/{:.2} ms, typical second's p99 {:.2} ms, copy answered {} (under the lease {}), {} lookups per round, {} Redis calls per no, {} tail reads/s, {} copy loads, context switches per no: server {:.2}, loadgen {:.2}; steal {:.1} %",
                target.name, run.rate, run.server_us, run.redis_us, run.loadgen_us, run.p50_ms, run.p90_ms, run.p99_ms, run.p999_ms, run.p99_window_median_ms,
                percent_or_dash(run.copy_answered_share), percent_or_dash(run.lease_share), one_decimal_or_dash(run.lookups_per_round),
                three_decimals_or_dash(run.redis_calls_per_lookup), one_decimal_or_dash(run.tail_reads_per_sec), run.copy_loads,
                run.server_switches, run.loadgen_switches, run.steal_share * 100.0
            );
            runs[i].push(run);
        }
    }
    Ok(runs)
}

/// The floor, an origin per spec, and the controls asked for, each with the processes whose CPU
/// it costs.
async fn start_targets(
    args: &Args,
    specs: &[String],
    redis_pids: &[u32],
    keys: &Arc<Vec<String>>,
) -> anyhow::Result<Vec<AbTarget>> {
    let floor = start_floor(&Launch::Process(args.loadgen_bin.clone())).await?;
    let mut targets = vec![AbTarget::floor("floor", floor)];
    // Every origin on the same Redis and Cassandra with the same filter settings; `extra_env` is
    // the one setting a target differs in.
    let origin_settings = |extra_env| OriginSettings {
        redis_url: format!("redis://{}/", args.ab.redis),
        redis_cluster_nodes: Vec::new(),
        cassandra: bloomgate_tests::cassandra_addr(),
        keyspace: "bloomgate_bench".into(),
        filter_enabled: true,
        journal_enabled: true,
        extra_env,
    };
    for spec in specs {
        let OriginSpec { name, env: extra_env, binary } = parse_origin(spec)?;
        let settings = origin_settings(extra_env);
        let binary = binary.unwrap_or_else(|| args.ab.origin_bin.clone());
        let origin = start_origin(&Launch::Process(binary), &settings).await?;
        targets.push(AbTarget::origin(&name, origin, redis_pids.to_vec(), keys).await?);
    }
    if args.stack_control {
        let origin = start_origin(&Launch::Process(args.ab.origin_bin.clone()), &origin_settings(Vec::new())).await?;
        let pid = origin.pid;
        targets.push(AbTarget {
            name: "origin-stack".into(),
            server: origin,
            filter: STACK_CONTROL_FILTER.into(),
            server_cpu: CpuGroup { name: "origin-stack".into(), pids: vec![pid] },
            redis_cpu: CpuGroup { name: "redis".into(), pids: redis_pids.to_vec() },
        });
    }
    if args.floor_control {
        let again = start_floor(&Launch::Process(args.loadgen_bin.clone())).await?;
        targets.push(AbTarget::floor("floor-again", again));
    }
    Ok(targets)
}

/// The fixed-rate rounds: every target at `--same-rate`, or at half its median maximum from
/// `max`; the kind of run (`same` or `half`) and its runs as JSON.
async fn fixed_rate_rounds(
    args: &Args,
    targets: &[AbTarget],
    max: &[Vec<AbRun>],
    workload: &Workload,
    closed: AbLoad,
) -> anyhow::Result<(&'static str, serde_json::Value)> {
    let (rates, title, kind) = match args.same_rate {
        Some(rate) => {
            anyhow::ensure!(rate > 0.0, "--same-rate {rate}: give lookups per second above 0");
            (vec![rate; targets.len()], format!("Fixed rate of {rate:.0} lookups/s for every target, medians"), "same")
        }
        None => (
            max.iter().map(|r| medians(r).rate / 2.0).collect::<Vec<f64>>(),
            "Fixed rate at half of each target's maximum, medians".to_owned(),
            "half",
        ),
    };
    let fixed = rounds(targets, args.ab.rounds, |i| AbLoad { rate: Some(rates[i]), ..closed }, workload, kind).await?;
    print_table(
        &title,
        targets,
        &fixed,
        &[("p99", |r| r.p99_ms), ("typical second's p99", |r| r.p99_window_median_ms)],
    );
    let runs = targets
        .iter()
        .zip(&fixed)
        .zip(&rates)
        .map(|((t, r), rate)| json!({"target": t.name, "rate": rate, "median": medians(r), "runs": r}))
        .collect::<Vec<_>>();
    Ok((kind, runs.into()))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let specs = match args.origins.is_empty() {
        true => vec!["barrier:BLOOMGATE_READ_CONSISTENCY=barrier".to_owned(), "lease".to_owned()],
        false => args.origins.clone(),
    };
    let redis_port = args.ab.redis.rsplit(':').next().unwrap_or("6399");
    let redis_pids = pids_matching("redis-server", Some(&format!(":{redis_port}")));
    anyhow::ensure!(!redis_pids.is_empty(), "no redis-server on port {redis_port}: run scripts/services start");
    let keys = Arc::new(present_keys(13, args.ab.keys));

    let targets = start_targets(&args, &specs, &redis_pids, &keys).await?;
    let workload = Workload::new(13, keys, 1.0, 1.0);
    let duration = Duration::from_secs(args.ab.duration);
    let closed = AbLoad { connections: args.connections, duration, rate: None };
    // Warm-up: connections, caches, local copies loaded.
    let warm = AbLoad { duration: Duration::from_secs(2), ..closed };
    rounds(&targets, 1, |_| warm, &workload, "warm-up").await?;
    let max = match args.same_rate {
        Some(_) => vec![Vec::new(); targets.len()],
        None => {
            let max = rounds(&targets, args.ab.rounds, |_| closed, &workload, "max").await?;
            print_table("Closed loop (maximum rate), medians", &targets, &max, &[("rate", |r| r.rate)]);
            max
        }
    };
    let mut all = json!({
        "keys": args.ab.keys, "rounds": args.ab.rounds, "duration_secs": args.ab.duration,
        "connections": args.connections, "targets": specs, "floor_control": args.floor_control, "stack_control": args.stack_control,
        "max": targets.iter().zip(&max).map(|(t, r)| json!({"target": t.name, "median": medians(r), "runs": r})).collect::<Vec<_>>(),
    });
    if !args.no_half_rate {
        let (kind, runs) = fixed_rate_rounds(&args, &targets, &max, &workload, closed).await?;
        all[kind] = runs;
    }
    if args.writes > 0 {
        all["writes"] = write_rounds(&args, &targets).await?;
    }
    if args.idle_secs > 0 {
        all["idle_redis_calls_per_sec"] = idle_calls(&targets, Duration::from_secs(args.idle_secs)).await?;
    }
    if let Some(out) = &args.ab.out {
        std::fs::write(out, serde_json::to_string_pretty(&all)?)?;
    }
    drop_preloaded(&targets).await
}

/// `--writes` writes per origin and round, the origins alternating; a table of medians, with the
/// p50's paired difference to the target named `barrier` when there is one.
async fn write_rounds(args: &Args, targets: &[AbTarget]) -> anyhow::Result<serde_json::Value> {
    let http = reqwest::Client::new();
    let origins: Vec<&AbTarget> = targets.iter().filter(|t| is_origin_with_filter(t)).collect();
    let mut runs: Vec<Vec<WriteRun>> = vec![Vec::new(); origins.len()];
    let gap = Duration::from_millis(args.write_gap_ms);
    for round in 0..args.ab.rounds {
        for i in round_order(origins.len(), round) {
            let t = origins[i];
            let run = write_run(&http, &t.server.base, &t.filter, args.writes, gap).await?;
            eprintln!(
                "writes round {round} {:>18}: {} writes, p50 {:.2} ms, p99 {:.2} ms, waited after the database write {}",
                t.name,
                run.writes,
                run.p50_ms,
                run.p99_ms,
                percent_or_dash(run.waited_share)
            );
            runs[i].push(run);
        }
    }
    let peer = origins.iter().position(|t| t.name == "barrier");
    println!("\nWrites, one at a time ({} per round, {} ms apart), medians\n", args.writes, args.write_gap_ms);
    println!("| target | p50 ms | p99 ms | p50 − barrier's (paired) ms | waited after the database write |");
    println!("|---|---:|---:|---:|---:|");
    let med = |runs: &[WriteRun], f: fn(&WriteRun) -> f64| median(runs.iter().map(f).collect()).unwrap_or(f64::NAN);
    let mut out = Vec::new();
    for (t, r) in origins.iter().zip(&runs) {
        let paired = peer.map(|p| median(r.iter().zip(&runs[p]).map(|(a, b)| a.p50_ms - b.p50_ms).collect()));
        let paired = paired.flatten().unwrap_or(f64::NAN);
        let (p50, p99, waited) = (med(r, |w| w.p50_ms), med(r, |w| w.p99_ms), med(r, |w| w.waited_share));
        println!("| {} | {p50:.2} | {p99:.2} | {paired:+.2} | {} |", t.name, percent_or_dash(waited));
        out.push(json!({"target": t.name, "p50_ms": p50, "p99_ms": p99, "p50_minus_barrier_ms": paired, "waited_share": waited, "runs": r}));
    }
    Ok(out.into())
}

/// Whether `t` is an origin asked about a filter of its own (not a floor, not origin-stack).
fn is_origin_with_filter(t: &AbTarget) -> bool {
    t.filter != "floor" && t.filter != STACK_CONTROL_FILTER
}

/// Every origin left without lookups: after 3 s, its Redis calls per second over `window`.
async fn idle_calls(targets: &[AbTarget], window: Duration) -> anyhow::Result<serde_json::Value> {
    let http = reqwest::Client::new();
    tokio::time::sleep(Duration::from_secs(3)).await;
    println!(
        "\nAt rest (no lookups for 3 s, then {} s counted): Redis calls per second per held filter\n",
        window.as_secs()
    );
    println!("| target | Redis calls/s |\n|---|---:|");
    let origins = targets.iter().filter(|t| is_origin_with_filter(t));
    let counted = origins.map(|t| async { (t.name.clone(), redis_calls_per_sec(&http, &t.server.base, window).await) });
    let mut out = serde_json::Map::new();
    for (name, calls) in futures::future::join_all(counted).await {
        let calls = calls?;
        println!("| {name} | {calls:.1} |");
        out.insert(name, json!(calls));
    }
    Ok(out.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(rate: f64) -> AbRun {
        AbRun { rate, ..AbRun::default() }
    }

    #[test]
    fn every_target_runs_first_in_some_round_and_each_round_runs_all() {
        let orders: Vec<Vec<usize>> = (0..3).map(|r| round_order(3, r).collect()).collect();
        assert_eq!(orders, [[0, 1, 2], [1, 2, 0], [2, 0, 1]]);
    }

    #[test]
    fn the_paired_ratio_compares_runs_of_the_same_round() {
        // The machine slowed down in round 2 for both: pairing keeps the ratio at 0.5.
        let floor = [run(100.0), run(100.0), run(10.0)];
        let target = [run(50.0), run(50.0), run(5.0)];
        assert_eq!(paired_ratio(&target, &floor, |r| r.rate), 0.5);
        assert_eq!(
            paired_ratio(&[run(1.0), run(3.0)], &[run(1.0), run(1.0)], |r| r.rate),
            2.0,
            "even count: mean of the middle two"
        );
    }
}
