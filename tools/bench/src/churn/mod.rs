//! The edge under churn: lookups (single keys and batches) at a fixed rate, writes of fresh
//! keys at a share of that rate, and a new generation of one of the filters every few seconds
//! (a rebuild), for as long as asked; the Worker's memory sampled throughout: `workerd`'s
//! resident memory (the isolate, the Cache API simulator and everything else in the process)
//! and the isolate's own report (wasm memory, what it holds against its budget). Every answer
//! is checked ([`traffic`]).
//!
//! Run with the Cache API in use and bypassed (`CACHE_API=false`), the difference in the
//! process's growth is what the local Cache API simulator keeps.
//!
//! # Layout
//! - this file: the settings, the stack (an origin on the test services, `wrangler dev` with
//!   its own state directory), the filters, the run and its report.
//! - [`traffic`]: the lookups and writes, and how an answer is checked.
//! - [`chart`]: the run's memory over time, as a PNG.

pub mod chart;
pub mod traffic;

use crate::cpu::cpu_seconds;
use crate::report::Machine;
use bloomgate_client::api::IsolateReport;
use bloomgate_tests::edge::{Options, Wrangler};
use bloomgate_tests::edge_load::{sample, workerd_processes, Sample};
use bloomgate_tests::origin::{TestOrigin, EDGE_SECRET};
use bloomgate_tests::{random_keys, unique_filter};
use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};
use traffic::{Stored, Tally};

/// What to run.
#[derive(Clone, Debug, Serialize)]
pub struct ChurnConfig {
    /// How long.
    pub duration: Duration,
    /// Lookup requests per second (a batch is one).
    pub rate: f64,
    /// Writes per lookup request.
    pub write_share: f64,
    /// Share of requests that are 20-key batches.
    pub batch_share: f64,
    /// Share of single lookups for stored keys.
    pub hit_share: f64,
    /// Filters churned at once.
    pub filters: usize,
    /// Keys each filter is sized for.
    pub capacity: u64,
    /// Keys stored in each before the run.
    pub preload: usize,
    /// A rebuild of the next filter this often; None = no new generations.
    pub generation_every: Option<Duration>,
    /// `EDGE_MAX_HELD_BYTES` (None = the worker's default).
    pub budget: Option<String>,
    /// `CACHE_API`.
    pub cache_api: bool,
    /// `LOG_REQUESTS`.
    pub log_requests: bool,
    /// The freshness bound S.
    pub freshness_secs: u32,
    /// Memory sampled this often.
    pub sample_every: Duration,
}

/// One sample, as reported.
#[derive(Clone, Debug, Serialize)]
pub struct ChurnSample {
    /// Seconds since the traffic started.
    pub secs: f64,
    /// Resident memory of the `workerd` running the Worker (and the simulators), MiB.
    pub worker_rss_mib: f64,
    /// Resident memory of wrangler's proxy `workerd`, MiB.
    pub proxy_rss_mib: f64,
    /// CPU seconds the Worker's `workerd` has used so far.
    pub worker_cpu_s: f64,
    /// CPU seconds wrangler's proxy `workerd` has used so far.
    pub proxy_cpu_s: f64,
    /// Lookup requests answered so far.
    pub requests: u64,
    /// New generations so far.
    pub generations: u64,
    /// The isolate's report, if it answered.
    pub isolate: Option<IsolateReport>,
}

/// What the run did.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ChurnTotals {
    /// Lookup requests sent.
    pub requests: u64,
    /// Keys looked up.
    pub keys: u64,
    /// Keys answered "not seen" by the edge itself.
    pub edge_no: u64,
    /// Wrong answers.
    pub wrong_answers: u64,
    /// Lookups answered 5xx.
    pub unavailable: u64,
    /// Lookups with no answer.
    pub io_errors: u64,
    /// Lookups skipped (too many in flight).
    pub skipped: u64,
    /// Writes acknowledged.
    pub writes: u64,
    /// Writes failed.
    pub write_errors: u64,
    /// New generations.
    pub generations: u64,
    /// Rebuilds that failed.
    pub rebuild_errors: u64,
}

/// A churn run's report.
#[derive(Clone, Debug, Serialize)]
pub struct ChurnReport {
    /// How it was started.
    pub command: String,
    /// The settings.
    pub config: ChurnConfig,
    /// The machine.
    pub machine: Machine,
    /// When the traffic started, seconds since the Unix epoch.
    pub started_at_unix: u64,
    /// Memory over time.
    pub samples: Vec<ChurnSample>,
    /// What the run did.
    pub totals: ChurnTotals,
}

/// Starts the stack, runs the churn `cfg` asks for, and reports.
pub async fn run_churn(cfg: &ChurnConfig, command: String) -> anyhow::Result<ChurnReport> {
    let origin = Arc::new(TestOrigin::on_services(|_| {}).await);
    let persist = std::env::temp_dir().join(format!("bloomgate-churn-{:016x}", rand::random::<u64>()));
    let mut options = Options::new(cfg.freshness_secs);
    options.persist_to = Some(persist.clone());
    options.vars.push(("CACHE_API".into(), cfg.cache_api.to_string()));
    options.vars.push(("LOG_REQUESTS".into(), cfg.log_requests.to_string()));
    if let Some(budget) = &cfg.budget {
        options.vars.push(("EDGE_MAX_HELD_BYTES".into(), budget.clone()));
    }
    let edge = Wrangler::start_with(&origin.base, EDGE_SECRET, options).await;
    let stored = Arc::new(filters(&origin, cfg).await);
    let processes = workerd_processes(edge.pid());
    anyhow::ensure!(processes.iter().any(|(_, r)| r == "worker"), "no workerd found under wrangler: {processes:?}");

    let tally = Arc::new(Tally::default());
    let started_at_unix = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let started = Instant::now();
    let until = started + cfg.duration;
    let shape = (cfg.rate, cfg.batch_share, cfg.hit_share);
    let lookups = tokio::spawn(traffic::lookups(edge.base.clone(), stored.clone(), tally.clone(), shape, until));
    let write_rate = cfg.rate * cfg.write_share;
    let writes = tokio::spawn(traffic::writes(origin.clone(), stored.clone(), tally.clone(), write_rate, until));
    let made = Arc::new(AtomicU64::new(0));
    let rebuilds =
        tokio::spawn(generations(origin.clone(), stored.filters.clone(), cfg.generation_every, until, made.clone()));

    let mut samples = Vec::new();
    let mut next = Instant::now();
    while next <= until {
        tokio::time::sleep_until(next.into()).await;
        let s = sample(&processes, &edge.base, started.elapsed(), tally.keys.load(Relaxed)).await;
        samples.push(churn_sample(&s, &processes, made.load(Relaxed), tally.requests.load(Relaxed)));
        eprintln!("{}", line(samples.last().expect("just pushed")));
        next += cfg.sample_every;
    }
    lookups.await?;
    writes.await?;
    let rebuild_errors = rebuilds.await?;
    let generations = made.load(Relaxed);
    // Let the last answers and writes come in, then the last sample.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let last = sample(&processes, &edge.base, started.elapsed(), 0).await;
    samples.push(churn_sample(&last, &processes, generations, tally.requests.load(Relaxed)));
    drop(edge);
    let _ = std::fs::remove_dir_all(&persist);
    Ok(ChurnReport {
        command,
        config: cfg.clone(),
        machine: Machine::describe(),
        started_at_unix,
        samples,
        totals: totals(&tally, generations, rebuild_errors),
    })
}

/// Creates `cfg.filters` filters of `cfg.capacity` keys and stores `cfg.preload` keys in each.
async fn filters(origin: &TestOrigin, cfg: &ChurnConfig) -> Stored {
    let mut names = Vec::new();
    let mut preloaded = Vec::new();
    for _ in 0..cfg.filters.max(1) {
        let name = unique_filter("churn");
        origin.create_filter(&name, cfg.capacity, 0.01).await;
        let keys = random_keys(cfg.preload.max(1));
        origin.insert_all(&name, &keys).await;
        eprintln!("[edge-memory] filter {name}: capacity {}, {} keys stored", cfg.capacity, keys.len());
        names.push(name);
        preloaded.push(keys);
    }
    Stored::new(names, preloaded, Duration::from_secs(u64::from(cfg.freshness_secs)))
}

/// Rebuilds the filters in turn, one every `every`, until `until`, counting new generations in
/// `made`; the rebuilds that failed.
async fn generations(
    origin: Arc<TestOrigin>,
    filters: Vec<String>,
    every: Option<Duration>,
    until: Instant,
    made: Arc<AtomicU64>,
) -> u64 {
    let Some(every) = every else { return 0 };
    let mut failed = 0;
    let mut next = Instant::now() + every;
    while next < until {
        tokio::time::sleep_until(next.into()).await;
        let filter = &filters[(made.load(Relaxed) + failed) as usize % filters.len()];
        match origin.rebuild_now(filter).await {
            Ok(_) => {
                made.fetch_add(1, Relaxed);
            }
            Err(e) => {
                failed += 1;
                eprintln!("[edge-memory] rebuild of {filter} failed: {e}");
            }
        }
        next = (next + every).max(Instant::now());
    }
    failed
}

fn churn_sample(s: &Sample, processes: &[(u32, String)], generations: u64, requests: u64) -> ChurnSample {
    let rss = |role: &str| s.rss.iter().filter(|r| r.role == role).map(|r| r.kib as f64 / 1024.0).sum();
    let cpu = |role: &str| processes.iter().filter(|(_, r)| r == role).filter_map(|(pid, _)| cpu_seconds(*pid)).sum();
    ChurnSample {
        secs: s.at.as_secs_f64(),
        worker_rss_mib: rss("worker"),
        proxy_rss_mib: rss("proxy"),
        worker_cpu_s: cpu("worker"),
        proxy_cpu_s: cpu("proxy"),
        requests,
        generations,
        isolate: s.isolate.clone(),
    }
}

/// A sample as one line of progress.
pub fn line(s: &ChurnSample) -> String {
    let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
    let isolate = s.isolate.as_ref().map_or("isolate: no report".to_owned(), |i| {
        format!(
            "wasm {:.1} MiB, held {:.2} of {:.1} MiB ({} copies, {} spare), tail {:.2} MiB",
            mib(i.wasm_bytes),
            mib(i.held.total),
            mib(i.budget_bytes),
            i.held.segment_count,
            i.held.spare_count,
            mib(i.held.journal_tails)
        )
    });
    format!(
        "{:>6.0}s  worker {:>5.0} MiB  proxy {:>5.0} MiB  generations {:>4}  {isolate}",
        s.secs, s.worker_rss_mib, s.proxy_rss_mib, s.generations
    )
}

fn totals(t: &Tally, generations: u64, rebuild_errors: u64) -> ChurnTotals {
    ChurnTotals {
        requests: t.requests.load(Relaxed),
        keys: t.keys.load(Relaxed),
        edge_no: t.edge_no.load(Relaxed),
        wrong_answers: t.wrong.load(Relaxed),
        unavailable: t.unavailable.load(Relaxed),
        io_errors: t.io.load(Relaxed),
        skipped: t.skipped.load(Relaxed),
        writes: t.writes.load(Relaxed),
        write_errors: t.write_errors.load(Relaxed),
        generations,
        rebuild_errors,
    }
}

/// The run in a few lines: memory at the start, the middle and the end; growth over the second
/// half; the Worker process's CPU per lookup request; the isolate's CPU by kind of work.
pub fn summary(r: &ChurnReport) -> String {
    let (Some(first), Some(last)) = (r.samples.first(), r.samples.last()) else { return String::new() };
    let mid = &r.samples[r.samples.len() / 2];
    let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
    let wasm = |s: &ChurnSample| s.isolate.as_ref().map_or(f64::NAN, |i| mib(i.wasm_bytes));
    let held = |s: &ChurnSample| s.isolate.as_ref().map_or(f64::NAN, |i| mib(i.held.total));
    let per_request = |a: &ChurnSample, b: &ChurnSample, cpu: fn(&ChurnSample) -> f64| {
        (cpu(b) - cpu(a)) * 1e6 / (b.requests.saturating_sub(a.requests)).max(1) as f64
    };
    let mut out = format!(
        "memory, start → middle → end: worker {:.0} → {:.0} → {:.0} MiB, proxy {:.0} → {:.0} → {:.0} MiB, \
         wasm {:.1} → {:.1} → {:.1} MiB, held {:.2} → {:.2} → {:.2} MiB\n",
        first.worker_rss_mib,
        mid.worker_rss_mib,
        last.worker_rss_mib,
        first.proxy_rss_mib,
        mid.proxy_rss_mib,
        last.proxy_rss_mib,
        wasm(first),
        wasm(mid),
        wasm(last),
        held(first),
        held(mid),
        held(last)
    );
    out += &format!(
        "second half: worker {:+.0} MiB, proxy {:+.0} MiB, wasm {:+.1} MiB; CPU per lookup request: worker {:.0} µs, \
         proxy {:.0} µs\n",
        last.worker_rss_mib - mid.worker_rss_mib,
        last.proxy_rss_mib - mid.proxy_rss_mib,
        wasm(last) - wasm(mid),
        per_request(mid, last, |s| s.worker_cpu_s),
        per_request(mid, last, |s| s.proxy_cpu_s)
    );
    if let Some(i) = &last.isolate {
        let c = &i.cpu;
        let us = |f: &bloomgate_client::api::CpuFigure| {
            f.us_each().map_or("–".into(), |v| format!("{v:.1} µs, {} set aside", f.set_aside))
        };
        out += &format!(
            "isolate CPU (its clock): edge \"no\" {} ({}), forwarded {} ({}), batch key {} ({}), journal chunk {} ({}), \
             segment decode {} ({})\n",
            us(&c.edge_no),
            c.edge_no.count,
            us(&c.forwarded),
            c.forwarded.count,
            us(&c.batch_key),
            c.batch_key.count,
            us(&c.catch_up),
            c.catch_up.count,
            us(&c.segment_decode),
            c.segment_decode.count
        );
    }
    out
}
