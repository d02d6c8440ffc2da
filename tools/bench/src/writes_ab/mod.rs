//! The writes A/B: how fresh the edge stays under writes, and what that costs in bytes from
//! the origin per write, with the origin's insert journal on and off, side by side in one run.
//!
//! Two origins (`journal_enabled` true and false) over the same Redis and Cassandra, one filter
//! each, preloaded with the same keys. For each round and side: a writes-only phase against the
//! origin (what the journal costs the write path: latency, origin and Redis CPU per write), then
//! the front (`wrangler dev` through a [`CountingProxy`], or the origin itself when there is no
//! edge) serves lookups at a fixed rate while the same keys are written at a fixed rate and a
//! sampled share of them is followed until the front answers "seen". The sides alternate order
//! from round to round, so a machine getting busier does not favour one.

//!
//! # Layout
//! - this file: the A/B's settings, its two origins and filters, and the rounds.
//! - [`side`]: one side in one round (the writes-only phase, then the front).
//! - [`results`]: what each run measured, the side-by-side table and the checks.
//! - [`isolate`]: what the edge isolate reported about itself over a run.

mod isolate;
pub mod results;
mod side;

pub use results::{checks, FrontRun, OriginWrites, WriteFigures, WriteRun, WritesReport};

use crate::config::{BenchConfig, WritesConfig};
use crate::cpu::{service_groups, CpuGroup};
use crate::filters::{preload, FilterSpec};
use crate::servers::{start_origin, Server};
use crate::workload::{present_keys, Workload};
use bloomgate_tests::origin::TOKEN;
use side::run_side;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One side of the A/B.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Side {
    Journal,
    NoJournal,
}

impl Side {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Side::Journal => "journal",
            Side::NoJournal => "no-journal",
        }
    }
}

/// What every side's runs share.
pub(crate) struct Shared<'a> {
    pub(crate) cfg: &'a BenchConfig,
    pub(crate) w: &'a WritesConfig,
    pub(crate) workload: Workload,
    pub(crate) base_groups: Vec<CpuGroup>,
    /// Names this run's written keys. A run that measures reused filters again must write keys
    /// they do not hold yet: re-adding the earlier run's keys sets no bit, bumps no segment and
    /// is "seen" at once, which made a reused journal-off side look free.
    pub(crate) write_salt: String,
}

/// Runs the A/B `w` asks for with `cfg`'s seed, filter settings, services and S.
pub async fn run_writes(cfg: &BenchConfig, w: &WritesConfig) -> anyhow::Result<WritesReport> {
    anyhow::ensure!(w.rate > 0.0 && w.writers > 0, "--write-rate and the writers must be positive");
    let http = reqwest::Client::builder().timeout(Duration::from_secs(60)).build()?;
    cfg.step("writes A/B: starting an origin with the insert journal (and one without, unless journal only)");
    let mut origins = vec![start_origin(&cfg.origin, &cfg.origin_settings(true, true)).await?];
    if !w.journal_only {
        origins.push(start_origin(&cfg.origin, &cfg.origin_settings(true, false)).await?);
    }
    // Capacity for the preload and every write of every round, so no automatic resize (a new
    // generation: every segment refetched) lands in the middle of a measurement.
    let per_round = w.rate * (w.origin_duration + w.warmup + w.duration).as_secs_f64();
    let capacity =
        w.capacity.unwrap_or_else(|| cfg.capacity_for(w.present as f64 + per_round * w.rounds as f64 + 1000.0));
    let present = Arc::new(present_keys(cfg.seed, w.present));
    let preload_started = Instant::now();
    let filters = if let Some(reused) = &w.reuse_filters {
        cfg.step(&format!("writes A/B: measuring the filters {reused:?} again (no preload)"));
        reuse_filters(&http, &origins, reused, per_round * w.rounds as f64).await?
    } else {
        preload_filters(cfg, w, &origins, capacity, &present).await?
    };
    let preload_secs = preload_started.elapsed().as_secs_f64();

    let shared = Shared {
        cfg,
        w,
        workload: Workload::new(cfg.seed, present.clone(), cfg.miss_share, cfg.zipf_s),
        write_salt: format!("{:08x}", rand::random::<u32>()),
        base_groups: service_groups(&cfg.redis_url),
    };
    let mut runs = Vec::new();
    for round in 1..=w.rounds.max(1) {
        let order = if round % 2 == 1 { [Side::Journal, Side::NoJournal] } else { [Side::NoJournal, Side::Journal] };
        for side in order.into_iter().filter(|s| !w.journal_only || *s == Side::Journal) {
            let i = side.index();
            runs.push(run_side(&shared, &http, &origins[i], &filters[i], side, round).await?);
        }
    }
    let settings = settings(&shared, capacity, preload_secs);
    Ok(WritesReport { settings, runs })
}

impl Side {
    /// Where this side's origin and filter are in the A/B's pairs.
    fn index(self) -> usize {
        if self == Side::Journal {
            0
        } else {
            1
        }
    }
}

/// The filters of an earlier run, checked for room for this run's `writes`: (journal side,
/// no-journal side).
async fn reuse_filters(
    http: &reqwest::Client,
    origins: &[Server],
    reused: &[String; 2],
    writes: f64,
) -> anyhow::Result<Vec<String>> {
    for (origin, name) in origins.iter().zip(reused) {
        let stats = format!("{}/v1/filters/{name}/stats", origin.base);
        let r = http.get(&stats).bearer_auth(TOKEN).send().await?;
        anyhow::ensure!(r.status().is_success(), "--write-filters: {name}: {} {}", r.status(), r.text().await?);
        let stats: serde_json::Value = r.json().await?;
        room_for_writes(name, &stats, writes)?;
    }
    Ok(reused.to_vec())
}

/// A new filter per side, preloaded with `present`: (journal side, no-journal side).
async fn preload_filters(
    cfg: &BenchConfig,
    w: &WritesConfig,
    origins: &[Server],
    capacity: u64,
    present: &Arc<Vec<String>>,
) -> anyhow::Result<Vec<String>> {
    let mut filters = Vec::new();
    for side in [Side::Journal, Side::NoJournal].into_iter().take(origins.len()) {
        let name = format!("fresh-{}-{:016x}", side.name(), rand::random::<u64>());
        cfg.step(&format!("writes A/B: preloading {} keys into {name} (capacity {capacity})", w.present));
        let spec = FilterSpec { name: &name, fp_rate: cfg.fp_rate, capacity, segment_bytes: w.segment_bytes };
        // Each through its own side's origin: whether a generation keeps a journal is decided
        // when it is named. The preload's entries are behind every segment the edge fetches.
        preload(&origins[side.index()].base, &spec, present, cfg.progress).await?;
        filters.push(name);
    }
    Ok(filters)
}

/// The A/B's settings, as reported.
fn settings(shared: &Shared<'_>, capacity: u64, preload_secs: f64) -> BTreeMap<String, String> {
    let (cfg, w) = (shared.cfg, shared.w);
    let mut s = BTreeMap::new();
    for (k, v) in [
        ("write_rate", w.rate.to_string()),
        ("writers", w.writers.to_string()),
        ("present_keys", w.present.to_string()),
        ("capacity", if w.reuse_filters.is_some() { "of the reused filters".into() } else { capacity.to_string() }),
        ("segment_bytes", w.segment_bytes.map_or("origin default (65536)".into(), |b| b.to_string())),
        ("lookup_rate", w.lookup_rate.to_string()),
        ("lookup_connections", w.lookup_connections.to_string()),
        ("duration_secs", w.duration.as_secs_f64().to_string()),
        ("warmup_secs", w.warmup.as_secs_f64().to_string()),
        ("origin_duration_secs", w.origin_duration.as_secs_f64().to_string()),
        ("rounds", w.rounds.to_string()),
        ("write_keys_salt", shared.write_salt.clone()),
        ("reused_filters", w.reuse_filters.as_ref().map_or("no (preloaded)".into(), |f| f.join(","))),
        ("sides", if w.journal_only { "journal only".into() } else { "journal and no-journal".into() }),
        ("edge_vars", w.edge_vars.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(",")),
        ("probe_every", w.probe_every.to_string()),
        ("probe_interval_ms", w.probe_interval.as_millis().to_string()),
        ("probe_margin_ms", w.probe_margin.as_millis().to_string()),
        ("edge_freshness_secs", cfg.edge_freshness_secs.map_or("no edge".into(), |s| s.to_string())),
        ("fp_rate", cfg.fp_rate.to_string()),
        ("miss_share", cfg.miss_share.to_string()),
        ("seed", cfg.seed.to_string()),
        (
            "preload",
            match &w.reuse_filters {
                Some(_) => "none: filters of an earlier run, this run's keys salted".into(),
                None => "each filter through its own side's origin (journal on / off)".into(),
            },
        ),
        ("preload_secs", format!("{preload_secs:.1}")),
    ] {
        s.insert(k.to_owned(), v);
    }
    s
}

/// A reused filter must take this run's writes without an automatic resize (a new generation,
/// every segment fetched again) landing in the measurement.
fn room_for_writes(name: &str, stats: &serde_json::Value, writes: f64) -> anyhow::Result<()> {
    let capacity = stats["capacity"].as_f64().unwrap_or(0.0);
    let held = stats["estimated_keys"].as_f64().unwrap_or(f64::INFINITY);
    anyhow::ensure!(
        held + writes <= capacity,
        "--write-filters: {name} holds ~{held:.0} keys of its capacity {capacity:.0}; this run writes \
         ~{writes:.0} more, which would resize it mid-measurement: preload new filters instead"
    );
    Ok(())
}
