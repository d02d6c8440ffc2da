//! An origin in a memory-limited cgroup under a burst far past what that memory holds: writers
//! sending full batch writes of the longest keys as fast as they are answered, with lookups
//! going on beside them at a bounded rate, between two quiet stretches. Measured: the origin's
//! peak RSS and the cgroup's peak charge against the limit, OOM kills, the answers by status
//! (the 429 share), lookups answered, every acknowledged batch found stored afterwards, and the
//! autoscaling signal: the refusal counters scraped on a grid, turned into a promtool rule test
//! of the shipped recording rule ([`series`]).
//!
//! Without a writable memory cgroup the origin runs with `memory_budget_bytes` at the limit
//! instead, and its RSS is compared with that.

pub mod cgroup;
pub mod load;
pub mod series;
pub mod summary;

use crate::counters::Samples;
use crate::servers::{start_origin, Launch, OriginSettings};
use bloomgate_tests::origin::TOKEN;
use cgroup::MemoryCgroup;
use load::{Answers, Writers};
use serde::Serialize;
use series::Series;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// What to run.
#[derive(Clone, Debug)]
pub struct BurstSpec {
    /// `bloomgate-origin`.
    pub origin_bin: PathBuf,
    /// Where the origin keeps its filter and keys.
    pub settings: OriginSettings,
    /// The memory limit, in bytes.
    pub limit: u64,
    /// Writers in the burst, each with one batch write in flight.
    pub writers: usize,
    /// Seconds of burst.
    pub burst_secs: u64,
    /// Seconds of lookups alone before and after the burst (at least the rule's window, so
    /// its value is seen at rest on both sides).
    pub quiet_secs: u64,
    /// Lookups per second throughout.
    pub lookups_per_sec: u32,
    /// Seconds between scrapes of the counters (divides 60).
    pub scrape_secs: u64,
}

/// What a burst did.
#[derive(Clone, Debug, Serialize)]
pub struct BurstReport {
    /// `cgroup v1`, `cgroup v2`, or `memory_budget_bytes` (no cgroup).
    pub confined_by: String,
    /// The limit, in bytes.
    pub limit_bytes: u64,
    /// The origin's derived caps and budget, from its /metrics at rest.
    pub caps: BTreeMap<String, f64>,
    /// Writers in the burst.
    pub writers: usize,
    /// The bytes of one batch write's body.
    pub batch_body_bytes: usize,
    /// Seconds of burst.
    pub burst_secs: u64,
    /// Batch writes by status (0 = no answer).
    pub writes: BTreeMap<u16, u64>,
    /// Batch writes with no answer, by the error's innermost cause.
    pub write_failures: BTreeMap<String, u64>,
    /// 429s among the batch writes answered.
    pub refused_share: f64,
    /// Lookups answered 200 or 404, and the other answers by status.
    pub lookups_answered: u64,
    /// Lookups answered otherwise, by status (0 = no answer).
    pub lookups_other: BTreeMap<u16, u64>,
    /// The origin's peak resident memory (VmHWM), in bytes.
    pub peak_rss_bytes: u64,
    /// The cgroup's peak charge (RSS, page cache, kernel memory), in bytes.
    pub cgroup_peak_bytes: Option<u64>,
    /// Processes the kernel killed in the cgroup for want of memory.
    pub oom_kills: u64,
    /// Whether the origin was still running after the burst.
    pub survived: bool,
    /// Keys of acknowledged batches looked up afterwards, and those not seen (must be 0).
    pub acknowledged_keys_checked: u64,
    /// Acknowledged keys answered "not seen".
    pub acknowledged_keys_lost: u64,
    /// The rule's value at each scrape (`None` before a whole window), per second.
    pub signal: Vec<Option<f64>>,
    /// Seconds between scrapes.
    pub scrape_secs: u64,
    /// The scrape indices where the burst began and ended.
    pub burst_steps: (usize, usize),
}

/// A burst's report and the counters' series.
pub struct Burst {
    /// The figures.
    pub report: BurstReport,
    /// The refusal counters on the scrape grid.
    pub series: Series,
}

/// Runs the burst.
pub async fn run(spec: &BurstSpec) -> anyhow::Result<Burst> {
    let cgroup = match MemoryCgroup::create(spec.limit) {
        Ok(c) => Some(c),
        Err(e) => {
            eprintln!("[burst] no memory cgroup ({e:#}): the origin gets memory_budget_bytes = the limit instead");
            None
        }
    };
    let mut settings = spec.settings.clone();
    let launch = match &cgroup {
        Some(c) => Launch::Confined { bin: spec.origin_bin.clone(), cgroup_procs: c.procs() },
        None => {
            settings.extra_env.push(("BLOOMGATE_MEMORY_BUDGET_BYTES".into(), spec.limit.to_string()));
            Launch::Process(spec.origin_bin.clone())
        }
    };
    let origin = start_origin(&launch, &settings).await?;
    let http = reqwest::Client::new();
    let caps = caps_at_rest(&Samples::scrape(&http, &origin.base).await?);
    eprintln!("[burst] origin pid {} at {}; caps {caps:?}", origin.pid, origin.base);

    let filter = format!("burst-{:08x}", rand::random::<u32>());
    let client = bloomgate_client::Client::builder(&origin.base).token(TOKEN).build()?;
    let create = bloomgate_client::api::CreateFilter {
        key_format: bloomgate_filter::KeyFormat::Hex { digits: None },
        ..bloomgate_client::api::CreateFilter::new(1_000_000, 0.01)
    };
    client.create_filter(&filter, &create).await?;

    let stop = Arc::new(AtomicBool::new(false));
    let lookups = Answers::default();
    let lookers = load::lookups(&origin.base, &filter, spec.lookups_per_sec, &lookups, stop.clone());

    let steps = |secs: u64| secs.div_ceil(spec.scrape_secs) as usize;
    let (quiet, burst) = (steps(spec.quiet_secs), steps(spec.burst_secs));
    let (series, writers) = on_the_grid(spec, &http, &origin.base, &filter, (quiet, burst)).await?;
    stop.store(true, Ordering::SeqCst);
    for looker in lookers {
        looker.await?;
    }
    let survived = bloomgate_tests::procs::rss_kib(origin.pid).is_some();
    let (checked, lost) = writers.check_stored(&client, &filter).await?;
    // The kernel's own peak (VmHWM) misses no spike; a process that is gone has none, and the
    // cgroup's peak and OOM count below speak for it.
    let peak_rss_bytes = bloomgate_tests::procs::status_kib(origin.pid, "VmHWM").unwrap_or(0) * 1024;
    drop(origin);
    let (cgroup_peak_bytes, oom_kills) = match &cgroup {
        Some(c) => (Some(c.peak_bytes()?), c.oom_kills()?),
        None => (None, 0),
    };
    let writes = writers.answers.by_status();
    let answered: u64 = writes.iter().filter(|(s, _)| **s != 0).map(|(_, n)| n).sum();
    let refused = writes.get(&429).copied().unwrap_or(0);
    let signal = (0..series.len()).map(|i| series.per_pod_rate(i)).collect();
    let lookups_by_status = lookups.by_status();
    let report = BurstReport {
        confined_by: confined_by(cgroup.as_ref()),
        limit_bytes: spec.limit,
        caps,
        writers: spec.writers,
        batch_body_bytes: writers.body_bytes,
        burst_secs: spec.burst_secs,
        refused_share: refused as f64 / answered.max(1) as f64,
        write_failures: writers.answers.failures(),
        writes,
        lookups_answered: lookups_by_status.iter().filter(|(s, _)| matches!(s, 200 | 404)).map(|(_, n)| n).sum(),
        lookups_other: lookups_by_status.into_iter().filter(|(s, _)| !matches!(s, 200 | 404)).collect(),
        peak_rss_bytes,
        cgroup_peak_bytes,
        oom_kills,
        survived,
        acknowledged_keys_checked: checked,
        acknowledged_keys_lost: lost,
        signal,
        scrape_secs: spec.scrape_secs,
        burst_steps: (quiet, quiet + burst),
    };
    Ok(Burst { report, series })
}

/// The scrape grid, every `scrape_secs` from now: `quiet` steps, the writers' burst for
/// `burst` steps, `quiet` steps again; the refusal counters at every step, and the writers.
async fn on_the_grid(
    spec: &BurstSpec,
    http: &reqwest::Client,
    base: &str,
    filter: &str,
    (quiet, burst): (usize, usize),
) -> anyhow::Result<(Series, Writers)> {
    let mut series = Series::new(spec.scrape_secs);
    let mut grid = tokio::time::interval(Duration::from_secs(spec.scrape_secs));
    grid.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut writers: Option<Writers> = None;
    for step in 0..=(2 * quiet + burst) {
        grid.tick().await;
        series.push(&refusals(&Samples::scrape(http, base).await?));
        if step == quiet {
            eprintln!("[burst] burst: {} writers for {} s", spec.writers, spec.burst_secs);
            writers = Some(Writers::start(base, filter, spec.writers));
        }
        if step == quiet + burst {
            eprintln!("[burst] quiet again");
            if let Some(w) = writers.as_mut() {
                w.stop().await;
            }
        }
    }
    Ok((series, writers.expect("the burst started at step `quiet`")))
}

/// What held the origin's memory: a cgroup (its version), or its own memory budget.
fn confined_by(cgroup: Option<&MemoryCgroup>) -> String {
    match cgroup.map(|c| c.version()) {
        Some(cgroup::Version::V1) => "cgroup v1".into(),
        Some(cgroup::Version::V2) => "cgroup v2".into(),
        None => "memory_budget_bytes".into(),
    }
}

/// `bloomgate_overloaded_total` by class.
fn refusals(samples: &Samples) -> BTreeMap<String, f64> {
    labelled(samples, "bloomgate_overloaded_total", "class")
}

/// The caps in force and the budget's parts, from a scrape.
fn caps_at_rest(samples: &Samples) -> BTreeMap<String, f64> {
    let mut caps = labelled(samples, "bloomgate_in_flight_cap", "kind");
    for (part, bytes) in labelled(samples, "bloomgate_memory_budget_bytes", "part") {
        caps.insert(format!("budget {part} (bytes)"), bytes);
    }
    caps
}

/// The samples of `metric`, keyed by the value of its `label`.
fn labelled(samples: &Samples, metric: &str, label: &str) -> BTreeMap<String, f64> {
    let prefix = format!("{metric}{{{label}=\"");
    samples
        .0
        .iter()
        .filter_map(|(name, value)| {
            let rest = name.strip_prefix(&prefix)?;
            Some((rest.split('"').next()?.to_owned(), *value))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::{labelled, Samples};

    #[test]
    fn labelled_samples_are_keyed_by_their_label() {
        let samples = Samples::parse(
            "# HELP x\nbloomgate_overloaded_total{class=\"lookup\"} 0\nbloomgate_overloaded_total{class=\"write_or_batch\"} 34\nbloomgate_overloaded_totals 9\n",
        );
        let by_class = labelled(&samples, "bloomgate_overloaded_total", "class");
        assert_eq!(by_class.len(), 2);
        assert_eq!(by_class["write_or_batch"], 34.0);
    }
}
