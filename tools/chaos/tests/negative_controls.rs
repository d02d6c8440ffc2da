//! Negative controls: a history checker that misses a known bug is not a checker. Each test runs
//! the shortest check that must catch one bug planted on purpose (feature `planted-bugs`, test
//! builds only) and asserts the checker reports violations of the kind that bug causes:
//!
//! | planted bug | where | check (schedule) | must report |
//! |---|---|---|---|
//! | `skip-read-barrier`: a local copy answers without its read barrier | origins, `read_consistency = barrier` | `quiet`: writes read back at once through the other origin | `false_negative_origin` |
//! | `skip-lease-wait`: a write acknowledged without waiting out the read leases | origins (leases, the default) | `quiet` | `false_negative_origin` |
//! | `skip-filter-add`: a write acknowledged without its filter add | origins | `quiet` | `false_negative_origin` |
//! | `skip-incarnation-check`: every Redis process is the same incarnation | origins | `rollback`: Redis restarted from an older snapshot | `false_negative_origin` |
//! | `ignore-freshness`: the edge uses a manifest however old | edge | `edge-cut`: the edge cut off while writes go on | `false_negative_edge` |
//! | `skip-replay`: a recovery from a checkpoint that never replays the writes logged since | origins | `rollback`: Redis restarted from an older snapshot, recovered from the checkpoint | `false_negative_origin` |
//! | `delete-stamped-behind`: a delete stamped the clock margin behind and acknowledged at once | origins | `quiet`: keys deleted through another origin as soon as their write was acknowledged, read at once | `deleted_but_seen` |
//!
//! Each focused schedule is a part of the whole one, which `chaos.rs` runs without planted bugs
//! and must pass: a control that fails, fails because of its bug.
//!
//! # Running
//! `scripts/services start`, `scripts/edge-build`, then the planted builds, each in a cargo
//! invocation of its own (features unify within one; the planted binary has a name of its own,
//! so it never replaces `bloomgate-chaos`):
//! `cargo build -p bloomgate-chaos --features planted-bugs --bin bloomgate-chaos-planted` and
//! `scripts/edge-build --planted` (into `edge/build-planted`), then
//! `cargo test -p bloomgate-chaos --test negative_controls -- --test-threads 1` (about two
//! minutes here for the seven). `scripts/test` does all of it. A planted build older than a source it is
//! built from fails the test with the command to rebuild it. The runs pause nothing and use a
//! private Redis, but they read and write the shared Cassandra.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::SystemTime;

/// The rollback schedule's run, without deletes (their automatic rebuild would end the
/// rolled-back generation early).
const ROLLBACK: &[&str] =
    &["--schedule", "rollback", "--duration", "8s", "--no-edge", "--recovery-wait", "10s", "--delete-rate", "0"];

/// One control: the bug, the run that must catch it, the violation it must report.
struct Control {
    bug: &'static str,
    args: &'static [&'static str],
    expect: &'static str,
}

#[test]
fn a_local_copy_answering_without_its_read_barrier_is_caught() {
    // In barrier mode: under read leases the writers' wait would hide a missing barrier.
    control(Control {
        bug: "skip-read-barrier",
        args: &["--schedule", "quiet", "--duration", "8s", "--no-edge", "--read-consistency", "barrier"],
        expect: "false_negative_origin",
    });
}

#[test]
fn a_write_acknowledged_before_the_read_leases_ran_out_is_caught() {
    control(Control {
        bug: "skip-lease-wait",
        args: &["--schedule", "quiet", "--duration", "8s", "--no-edge"],
        expect: "false_negative_origin",
    });
}

#[test]
fn a_write_acknowledged_without_its_filter_add_is_caught() {
    control(Control {
        bug: "skip-filter-add",
        args: &["--schedule", "quiet", "--duration", "8s", "--no-edge"],
        expect: "false_negative_origin",
    });
}

#[test]
fn a_delete_that_removes_nothing_is_caught() {
    // The origins share one clock: stamped a margin (1 s) behind, the delete loses to every
    // write of the last second, and the workload's deletes right after a write are in it.
    control(Control {
        bug: "delete-stamped-behind",
        args: &["--schedule", "quiet", "--duration", "8s", "--no-edge"],
        expect: "deleted_but_seen",
    });
}

#[test]
fn a_redis_gone_back_in_time_unnoticed_is_caught() {
    control(Control { bug: "skip-incarnation-check", args: ROLLBACK, expect: "false_negative_origin" });
}

#[test]
fn a_recovery_that_skips_the_replay_is_caught() {
    // The rollback's recovery starts from the newest checkpoint (one every 2 s): the writes
    // acknowledged after it, before and after the snapshot, are only in the log.
    control(Control { bug: "skip-replay", args: ROLLBACK, expect: "false_negative_origin" });
}

#[test]
fn an_edge_ignoring_its_freshness_bound_is_caught() {
    let build = repo().join("edge/build-planted");
    let sources = [repo().join("edge/src"), repo().join("shared/src")];
    assert_fresh(&build.join("index_bg.wasm"), &sources, "scripts/edge-build --planted");
    control(Control {
        bug: "ignore-freshness",
        args: &[
            "--schedule",
            "edge-cut",
            "--duration",
            "8s",
            "--edge-build",
            "edge/build-planted",
            "--delete-rate",
            "0",
        ],
        expect: "false_negative_edge",
    });
}

fn repo() -> PathBuf {
    bloomgate_tests::repo_root()
}

/// `bloomgate-chaos-planted`, beside the `bloomgate-chaos` this test was built with, and no
/// older than any source it is built from.
fn planted_binary() -> PathBuf {
    let exe = Path::new(env!("CARGO_BIN_EXE_bloomgate-chaos")).with_file_name("bloomgate-chaos-planted");
    let root = repo();
    let sources =
        ["origin/src", "origin/client/src", "shared/src", "tests/src", "tools/chaos/src"].map(|d| root.join(d));
    assert_fresh(
        &exe,
        &sources,
        "cargo build -p bloomgate-chaos --features planted-bugs --bin bloomgate-chaos-planted",
    );
    exe
}

/// Fails unless `built` exists and is newer than every file under `sources`.
fn assert_fresh(built: &Path, sources: &[PathBuf], build: &str) {
    let Ok(built_at) = std::fs::metadata(built).and_then(|m| m.modified()) else {
        panic!("{} is missing: build it with `{build}`", built.display());
    };
    let newest = sources.iter().filter_map(|dir| newest_file(dir)).max();
    if let Some((_, file)) = newest.filter(|(at, _)| *at > built_at) {
        panic!("{} is older than {}: rebuild it with `{build}`", built.display(), file.display());
    }
}

/// The most recently modified file under `dir`, with its time.
fn newest_file(dir: &Path) -> Option<(SystemTime, PathBuf)> {
    let mut newest: Option<(SystemTime, PathBuf)> = None;
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        let path = entry.path();
        let found = if path.is_dir() {
            newest_file(&path)
        } else {
            entry.metadata().and_then(|m| m.modified()).ok().map(|at| (at, path))
        };
        if let Some(found) = found {
            if newest.as_ref().is_none_or(|(at, _)| found.0 > *at) {
                newest = Some(found);
            }
        }
    }
    newest
}

/// Runs the planted build with `c.bug` selected and checks that the checker reported it.
fn control(c: Control) {
    let exe = planted_binary();
    let dir = std::env::temp_dir().join("bloomgate-chaos");
    std::fs::create_dir_all(&dir).unwrap();
    let id = format!("control-{}-{}", c.bug, std::process::id());
    let report = dir.join(format!("{id}.json"));
    let status = Command::new(&exe)
        .current_dir(repo())
        .args(["run", "--seed", "9", "--planted-bug", c.bug])
        .args(c.args)
        .arg("--report")
        .arg(&report)
        .arg("--work-dir")
        .arg(&dir)
        .status()
        .expect("start bloomgate-chaos-planted");
    let text = std::fs::read_to_string(&report).unwrap_or_else(|_| {
        panic!("bloomgate-chaos-planted ended with {status} and wrote no report: its stderr above says why")
    });
    let r: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(r["planted_bug"], c.bug, "the report names the planted bug");
    let found = r["violation_counts"][c.expect].as_u64().unwrap_or(0);
    assert!(
        found > 0,
        "planted bug {} went unnoticed: no {} among the violations {} of {} checked operations; report {}",
        c.bug,
        c.expect,
        r["violation_counts"],
        r["checked"]["ops"],
        report.display()
    );
    assert!(!status.success(), "a run with violations must exit non-zero, not {status}");
    eprintln!("negative control {}: {found} {} (all: {})", c.bug, c.expect, r["violation_counts"]);
}
