//! The history check in CI: `bloomgate-chaos run` for its 2-minute schedule (two origin
//! processes and the edge on a private Redis, the shared Cassandra and `wrangler dev`; every
//! fault of the schedule at least once), zero violations in the checked history (errors only as
//! the excuse table allows), and every evidence floor met. Then the same on a Redis Cluster of
//! 3 masters with a replica each, whose masters are killed in turn.
//!
//! # Running
//! `scripts/services start`, `scripts/services start --topology cluster redis` and
//! `scripts/edge-build` (builds the worker, installs wrangler), then
//! `cargo test -p bloomgate-chaos --test chaos -- --test-threads 1` (about 6 minutes here,
//! wrangler's starts included). `BG_TEST_REDIS_CLUSTER` names nodes to reach the
//! cluster through (default `127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003`); the run empties
//! it first. The runs pause the shared Cassandra with SIGSTOP for a few seconds (and always
//! continue it) and kill the cluster's masters: run them alone. `BG_TEST_CASSANDRA` names
//! Cassandra's address, `BG_CASSANDRA_PID_FILE` its pid file if `scripts/services` did
//! not start it. The JSON report and the history are written to the temp directory; the
//! Markdown summary is printed.

use serde_json::Value;
use std::process::Command;

#[test]
fn two_minutes_of_faults_leave_no_violation_in_the_history() {
    run_and_check("ci", &[]);
}

#[test]
fn two_minutes_of_faults_on_a_redis_cluster_with_failovers_leave_no_violation() {
    let seeds = bloomgate_tests::redis_cluster::seed_nodes();
    for node in &seeds {
        assert!(
            std::net::TcpStream::connect(node).is_ok(),
            "the Redis Cluster node {node} is not reachable: start it with `scripts/services start --topology cluster redis` (or name the cluster in BG_TEST_REDIS_CLUSTER)"
        );
    }
    run_and_check("ci-cluster", &["--redis-cluster", &seeds.join(",")]);
}

/// Runs `bloomgate-chaos run` for two minutes with `extra` arguments and checks its report:
/// every fault injected, no violation, every evidence floor met.
fn run_and_check(name: &str, extra: &[&str]) {
    let dir = std::env::temp_dir().join("bloomgate-chaos");
    std::fs::create_dir_all(&dir).unwrap();
    let id = format!("{name}-{}", std::process::id());
    let report = dir.join(format!("{id}.json"));
    let history = dir.join(format!("{id}.history.jsonl"));
    let status = Command::new(env!("CARGO_BIN_EXE_bloomgate-chaos"))
        .args(["run", "--duration", "2m", "--seed", "9"])
        .arg("--report")
        .arg(&report)
        .arg("--history")
        .arg(&history)
        .arg("--work-dir")
        .arg(&dir)
        .args(extra)
        .status()
        .expect("start bloomgate-chaos");
    let text = std::fs::read_to_string(&report).unwrap_or_else(|_| {
        panic!("bloomgate-chaos ended with {status} and wrote no report: its stderr above says why")
    });
    let r: Value = serde_json::from_str(&text).unwrap();
    let missing = r["faults_missing"].as_array().map_or(0, Vec::len);
    assert_eq!(
        missing,
        0,
        "faults not injected: {} (harness notes: {}); report {}",
        r["faults_missing"],
        r["harness_notes"],
        report.display()
    );
    assert_eq!(
        r["violations"].as_u64(),
        Some(0),
        "the history of {} checked operations has violations: {}; examples and the fault table are in the \
         summary above and in {} (history: {})",
        r["checked"]["ops"],
        r["violation_counts"],
        report.display(),
        history.display()
    );
    let unmet: Vec<&Value> =
        r["floors"].as_array().map_or(Vec::new(), |f| f.iter().filter(|f| f["met"] != true).collect());
    assert!(
        unmet.is_empty() && r["floors"].as_array().is_some_and(|f| !f.is_empty()),
        "too little was shown: evidence floors not met: {unmet:?}; report {}",
        report.display()
    );
    assert!(status.success(), "bloomgate-chaos ended with {status}; report {}", report.display());
}
