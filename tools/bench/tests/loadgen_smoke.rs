//! Smoke run of the load harness (`bloomgate-loadgen`): tiny sizes, a few seconds, real Redis
//! and Cassandra, origins and the hello-world floor in this process. It keeps the harness from
//! rotting and checks what must hold at any size and on any load: the baseline reads Cassandra
//! once per lookup, the filter cuts that to the hits plus about fp_rate of the misses, and
//! nothing fails or answers wrong. It also runs the writes A/B (`--write-rate`) briefly with the
//! origin as the front: every written key is seen at once, and only the side with the insert
//! journal appends to it. No timing is asserted (CI shares two cores).
//!
//! # Running
//! `scripts/services start`, then `cargo test -p bloomgate-bench --test loadgen_smoke`.
//! The full run (edge included) is `bloomgate-loadgen run`; see BENCHMARKS.md.

use bloomgate_bench::chart::{draw_all, load_font};
use bloomgate_bench::config::{BenchConfig, SweepConfig, WritesConfig};
use bloomgate_bench::report::BenchReport;
use bloomgate_bench::run::run_bench;
use bloomgate_bench::servers::Launch;
use bloomgate_tests::{cassandra_addr, redis_addr, require};
use std::time::Duration;

const FP_RATE: f64 = 0.01;
const MISS_SHARE: f64 = 0.8;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_harness_measures_what_the_filter_saves() {
    require("Redis", &redis_addr()).await;
    require("Cassandra", &cassandra_addr()).await;
    let report = run_bench(&smoke_config()).await.expect("bench run");
    println!("{}", report.markdown());
    check_side_by_side(&report);
    check_writes(&report);
    check_artefacts(&report);
}

/// Tiny sizes, a second or two per run, the origins in this process.
fn smoke_config() -> BenchConfig {
    BenchConfig {
        seed: 6,
        present: 2_000,
        fp_rate: FP_RATE,
        capacity_headroom: 1.1,
        segment_bytes: Some(4096),
        miss_share: MISS_SHARE,
        zipf_s: 0.99,
        connections: 8,
        duration: Duration::from_millis(1200),
        warmup: Duration::from_millis(200),
        half_rate: true,
        edge_freshness_secs: None,
        origin: Launch::Thread,
        floor: Launch::Thread,
        redis_url: format!("redis://{}/", redis_addr()),
        cassandra: cassandra_addr(),
        keyspace: "bloomgate_loadgen_smoke".into(),
        sweep: Some(SweepConfig {
            present: 2_000,
            fp_rates: vec![0.1],
            miss_shares: vec![0.0, 0.95],
            lookups: 1_000,
            segment_bytes: Some(4096),
        }),
        edge_connections: None,
        edge_duration: None,
        quiet_wait: Duration::ZERO,
        progress: false,
        side_by_side: true,
        writes: Some(WritesConfig {
            rate: 50.0,
            writers: 2,
            present: 2_000,
            segment_bytes: Some(4096),
            lookup_rate: 100.0,
            lookup_connections: 4,
            duration: Duration::from_millis(2000),
            warmup: Duration::from_millis(300),
            origin_duration: Duration::from_millis(1000),
            rounds: 1,
            probe_every: 5,
            probe_interval: Duration::from_millis(50),
            probe_margin: Duration::from_millis(500),
            reuse_filters: None,
            journal_only: false,
            capacity: None,
            edge_vars: Vec::new(),
        }),
        command: "cargo test -p bloomgate-bench --test loadgen_smoke".into(),
    }
}

/// Every target answered without errors; the reads per lookup are what the filter promises,
/// in the side-by-side runs and in the sweep.
fn check_side_by_side(report: &BenchReport) {
    for t in &report.targets {
        assert!(t.lookups > 0, "{}: no lookups answered", t.name);
        assert_eq!(t.error_total, 0, "{}: errors {:?}", t.name, t.errors);
        assert_eq!(t.wrong_answers, 0, "{}: wrong answers", t.name);
    }
    let names: Vec<&str> = report.targets.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["floor", "floor-half", "baseline", "filter", "filter-negatives", "filter-negatives-half"]);

    // The baseline reads Cassandra for every lookup, and Cassandra agrees when it can be asked.
    let baseline = report.target("baseline").unwrap();
    let reads = baseline.cassandra_reads_per_lookup.unwrap();
    assert!((reads - 1.0).abs() < 1e-9, "baseline reads/lookup {reads}");
    if let Some(c) = baseline.cassandra_coordinator_reads_per_lookup {
        assert!((0.95..1.1).contains(&c), "Cassandra counted {c} reads/lookup");
    }

    // With the filter: every hit reads once, misses only at about fp_rate (×3 + 3 reads of
    // slack: a few hundred misses make a noisy estimate).
    for name in ["filter", "filter-negatives"] {
        let t = report.target(name).unwrap();
        let reads = (t.cassandra_reads_per_lookup.unwrap() * t.lookups as f64).round();
        let beyond_hits = reads - t.hits as f64;
        assert!(beyond_hits >= 0.0, "{name}: fewer reads ({reads}) than hits ({})", t.hits);
        assert!(
            beyond_hits <= t.misses as f64 * FP_RATE * 3.0 + 3.0,
            "{name}: {beyond_hits} reads for {} misses at fp_rate {FP_RATE}",
            t.misses
        );
    }
    let mix = report.target("filter").unwrap();
    let theory = (1.0 - MISS_SHARE) + MISS_SHARE * FP_RATE;
    assert!(
        mix.cassandra_reads_per_lookup.unwrap() < theory + 0.15,
        "filtered reads/lookup {:?} vs theory {theory}",
        mix.cassandra_reads_per_lookup
    );

    // The sweep: no misses = one read per lookup; 95 % misses at fp 10 % ≈ 0.05 + 0.095.
    assert_eq!(report.sweep_error, None);
    assert_eq!(report.sweep.len(), 2);
    let all_hits = &report.sweep[0];
    assert!((all_hits.reads_per_lookup - 1.0).abs() < 1e-9);
    let mostly_misses = &report.sweep[1];
    assert!(
        mostly_misses.excess_reads_per_lookup <= 0.95 * 0.1 * 2.0 + 0.03,
        "false-positive reads/lookup {} at fp 10 %",
        mostly_misses.excess_reads_per_lookup
    );
    assert!(report.checks.iter().any(|c| c.target.starts_with("Cassandra reads/lookup")));
}

/// The writes A/B, with the origin as the front (no edge here): read-your-writes, so every
/// followed key is seen on its first lookup; the journal grows only on the side that keeps one.
fn check_writes(report: &BenchReport) {
    assert_eq!(report.writes_error, None);
    let writes = report.writes.as_ref().expect("the writes A/B ran");
    let sides: Vec<(&str, bool)> = writes.runs.iter().map(|r| (r.side.as_str(), r.journal_enabled)).collect();
    assert_eq!(sides, [("journal", true), ("no-journal", false)]);
    for r in &writes.runs {
        let (f, o) = (&r.front, r.origin_writes.as_ref().expect("the writes-only phase ran"));
        let side = &r.side;
        assert!(o.writes.writes > 0 && f.writes.writes > 0, "{side}: no writes acknowledged");
        assert_eq!(o.origin_writes_counted, o.writes.writes as f64, "{side}: the origin counted other writes");
        assert_eq!(o.writes.errors.total() + f.writes.errors.total(), 0, "{side}: write errors");
        assert!(f.lookups > 0 && f.lookup_errors.total() == 0, "{side}: lookups {} {:?}", f.lookups, f.lookup_errors);
        assert!(f.probes > 0, "{side}: no key followed");
        assert_eq!((f.never_seen, f.wrong_answers, f.probe_errors.total()), (0, 0, 0), "{side}");
        assert_eq!(f.probe_polls, f.probes, "{side}: the origin should see a key as soon as it acknowledges it");
        assert!(f.traffic.is_none(), "no edge, no proxy");
        let entries = r.filter_stats["journal_entries"].as_f64();
        // Redis's own count: the journal's append is one more XADD per write (other clients of
        // the shared Redis can only add to it).
        if r.journal_enabled && !o.redis_calls_per_write.is_empty() {
            let xadd = o.redis_calls_per_write.get("xadd").copied().unwrap_or(0.0);
            assert!(xadd >= 0.99, "{side}: {xadd} XADD per write");
        }
        if r.journal_enabled {
            let written = (o.writes.writes + f.writes.writes) as f64;
            assert!(entries.is_some_and(|e| e >= written), "{side}: journal entries {entries:?} for {written} writes");
        } else {
            assert_eq!(entries, None, "{side}: an origin without the journal reports none");
        }
    }
    let fresh = report.checks.iter().find(|c| c.target.starts_with("writes: every followed key")).expect("check");
    assert!(fresh.met, "{}", fresh.measured);
}

/// The artefacts: JSON always, charts where a font is installed.
fn check_artefacts(report: &BenchReport) {
    let dir = std::env::temp_dir().join(format!("bloomgate-loadgen-smoke-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let json = serde_json::to_string_pretty(report).unwrap();
    assert!(json.contains("\"cassandra_reads_per_lookup\""));
    if load_font(None).is_ok() {
        let files = draw_all(report, &dir, None).expect("charts");
        assert_eq!(files.len(), 4);
        for f in files {
            assert!(std::fs::metadata(&f).unwrap().len() > 1000, "{} is empty", f.display());
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
