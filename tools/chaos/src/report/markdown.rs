//! The Markdown summary: what failed first (the verdict, and the edge's death if it died),
//! then the run, the evidence floors, the operations, the fault tables (what each excused, the
//! writes acknowledged during each), memory, and one column per violation kind.

use super::Report;
use crate::check::ViolationKind;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// The Markdown summary.
pub fn markdown(r: &Report) -> String {
    let mut md = String::new();
    headline(&mut md, r);
    run_summary(&mut md, r);
    floor_table(&mut md, r);
    operation_tables(&mut md, r);
    fault_tables(&mut md, r);
    excuse_tables(&mut md, r);
    rebuilds_and_memory(&mut md, r);
    violations(&mut md, r);
    md
}

/// The verdict, and the edge's death right after it if it died.
fn headline(md: &mut String, r: &Report) {
    let verdict = if r.passed {
        "PASSED: no violations, every evidence floor met".to_owned()
    } else if r.violations > 0 {
        format!("FAILED: {} violations", r.violations)
    } else {
        format!("FAILED: evidence floors not met: {}", r.floors_unmet.join(", "))
    };
    let _ = writeln!(md, "### bloomgate-chaos: {verdict}\n");
    if let Some(bug) = &r.settings.planted_bug {
        let _ = writeln!(md, "**Planted bug: `{bug}`** (a negative control: this run must fail).\n");
    }
    if let Some(down) = &r.edge_down {
        let _ = writeln!(
            md,
            "**The edge stopped answering at {:.1} s**: every connection refused, no edge_cut active, until the harness \
             gave up on it at {:.1} s and sent it nothing more. {} edge operations failed from then on and {} were not \
             sent; the one `edge_down` violation stands for them all.{}\n",
            down.refused_since as f64 / 1e6,
            down.at as f64 / 1e6,
            r.checked.edge_down_failures,
            down.not_sent,
            if down.note.is_empty() { String::new() } else { format!(" Its log ends: `{}`", down.note.replace('`', "'")) }
        );
    }
}

/// The command, the run's settings, what was checked and who answered.
fn run_summary(md: &mut String, r: &Report) {
    let _ = writeln!(md, "`{}`\n", r.settings.command);
    let set = &r.settings;
    let edge = if set.edge { format!(" + edge (S = {} s)", set.freshness_secs) } else { String::new() };
    let _ = writeln!(
        md,
        "{:.1} s from {}, seed {}, {} origins{edge}, keyspace `{}`; errors excused only as the excuse table allows; RSS limit {} MiB per origin, {} MiB for the edge.\n",
        r.run_secs, r.started_at, set.seed, set.origins, set.keyspace, set.rss_limit_mib, set.edge_rss_limit_mib
    );
    let c = &r.checked;
    let _ = writeln!(
        md,
        "**{} operations checked** ({:.0}/s), {} key answers: {} had to be seen at an origin, {} at the edge ({} of keys deleted and written again), {} had to be not seen (never written), {} not seen after an acknowledged delete, {} unconstrained; {} \"not seen\" answered by the edge itself; {} acknowledged keys read back from Cassandra; {} errors excused ({} by observed stalls, {} as possible false positives while the database was down); operations skipped at the client's in-flight caps: {} to the origins, {} to the edge.\n",
        c.ops,
        c.ops as f64 / r.run_secs.max(1e-9),
        c.answers,
        c.must_be_seen_origin,
        c.must_be_seen_edge,
        c.must_be_seen_readded,
        c.must_not_be_seen,
        c.must_be_not_seen_after_delete,
        c.unconstrained,
        c.edge_no_answers,
        c.db_keys,
        c.excused_errors,
        c.excused_in_observed_stalls,
        c.excused_as_false_positives,
        r.skipped_ops.0,
        r.skipped_ops.1
    );
    let answers: Vec<String> = r.answered_by.iter().map(|(what, n)| format!("{what} {n}")).collect();
    let _ = writeln!(md, "Answers: {}.\n", answers.join(", "));
}

/// The evidence floors: formula, required, seen.
fn floor_table(md: &mut String, r: &Report) {
    let _ = writeln!(md, "| evidence floor | formula | required | seen | met |\n|---|---|---:|---:|---|");
    for f in &r.floors {
        let met = if f.met { "yes" } else { "**NO**" };
        let _ = writeln!(md, "| {} | {} | {} | {} | {met} |", f.name, f.formula, f.required, f.seen);
    }
    let _ = writeln!(md);
}

/// What each fault kind excused, and the writes acknowledged while each was on.
fn excuse_tables(md: &mut String, r: &Report) {
    let _ = writeln!(md, "\n| fault | errors it excused (target operation status: count) |\n|---|---|");
    for (fault, by) in &r.excused {
        let parts: Vec<String> = by.iter().map(|(what, n)| format!("{what}: {n}")).collect();
        let _ = writeln!(md, "| {fault} | {} |", parts.join(", "));
    }
    if r.excused.is_empty() {
        let _ = writeln!(md, "| (none) | no error needed an excuse |");
    }
    let _ = writeln!(md, "\n| writes during | writes | acknowledged | share |\n|---|---:|---:|---:|");
    for row in &r.availability {
        let share = row.acknowledged.map_or("-".to_owned(), |a| format!("{:.1} %", a * 100.0));
        let _ = writeln!(md, "| {} | {} | {} | {share} |", row.during, row.writes.total, row.writes.ok);
    }
}

/// Operations by kind and by outcome, latencies, the most frequent failures.
fn operation_tables(md: &mut String, r: &Report) {
    let _ = writeln!(md, "| operation | count |\n|---|---:|");
    for (kind, n) in &r.ops_by_kind {
        let _ = writeln!(md, "| {kind} | {n} |");
    }
    let _ = writeln!(md, "\n| outcome | count |\n|---|---:|");
    for (outcome, n) in &r.outcomes {
        let _ = writeln!(md, "| {outcome} | {n} |");
    }
    let _ = writeln!(md, "\n| latency | p50 ms | p99 ms | max ms |\n|---|---:|---:|---:|");
    for (what, [p50, p99, max]) in &r.latency_ms {
        let _ = writeln!(md, "| {what} | {p50:.1} | {p99:.1} | {max:.1} |");
    }
    if !r.errors.is_empty() {
        let mut errors: Vec<(&String, &u64)> = r.errors.iter().collect();
        errors.sort_by(|a, b| b.1.cmp(a.1));
        let _ = writeln!(md, "\n| failed operations (most frequent) | count |\n|---|---:|");
        for (what, n) in errors.into_iter().take(8) {
            let _ = writeln!(md, "| {} | {n} |", what.replace('|', "/"));
        }
    }
}

/// Faults injected (and those missing), and stalls observed that nobody injected.
fn fault_tables(md: &mut String, r: &Report) {
    let _ = writeln!(
        md,
        "\n| fault | injected | seconds | new generation in time | first note |\n|---|---:|---:|---:|---|"
    );
    for f in &r.faults {
        let _ = writeln!(
            md,
            "| {} | {} | {:.1} | {} | {} |",
            f.fault,
            f.injected,
            f.seconds,
            f.repaired.as_deref().unwrap_or("-"),
            f.note.replace('|', "/")
        );
    }
    for missing in &r.faults_missing {
        let _ = writeln!(md, "| {missing} | **0** | - | - | not injected |");
    }
    if r.observed.is_empty() {
        let _ = writeln!(md, "\nNo stall observed (Cassandra and Redis probed directly every 200 ms).");
    } else {
        let _ = writeln!(
            md,
            "\n| observed stall (not injected) | windows | seconds | outside injected faults | longest |\n|---|---:|---:|---:|---|"
        );
        for o in &r.observed {
            let _ = writeln!(
                md,
                "| {} | {} | {:.1} | {} | {} |",
                o.fault,
                o.windows,
                o.seconds,
                o.outside_injected,
                o.note.replace('|', "/")
            );
        }
    }
}

/// Automatic rebuilds the origins started, and the highest RSS of each process.
fn rebuilds_and_memory(md: &mut String, r: &Report) {
    if !r.automatic_rebuilds.is_empty() {
        let rebuilds: Vec<String> = r.automatic_rebuilds.iter().map(|(why, n)| format!("{why} ×{n}")).collect();
        let _ = writeln!(md, "\nAutomatic rebuilds started (origin logs): {}.", rebuilds.join(", "));
    }
    let mut rss: Vec<(&String, &f64)> = r.rss_max_mib.iter().collect();
    rss.sort_by_key(|(process, _)| process.starts_with("edge")); // the origins first
    let rss: Vec<String> = rss.into_iter().map(|(p, m)| format!("{p} {m:.0} MiB")).collect();
    let _ =
        writeln!(md, "\nHighest RSS: {}.\n", if rss.is_empty() { "not sampled".to_owned() } else { rss.join(", ") });
}

/// One column per violation kind, what was involved, examples, and the harness's notes.
fn violations(md: &mut String, r: &Report) {
    let kinds: Vec<&str> = ViolationKind::ALL.iter().map(|k| k.name()).collect();
    let _ = writeln!(md, "| {} |", kinds.join(" | "));
    let _ = writeln!(md, "|{}", "---:|".repeat(kinds.len()));
    let counts: Vec<String> =
        kinds.iter().map(|k| r.violation_counts.get(*k).copied().unwrap_or(0).to_string()).collect();
    let _ = writeln!(md, "| {} |", counts.join(" | "));
    for (kind, by) in &r.violation_breakdown {
        let mut by: Vec<(&String, &u64)> = by.iter().collect();
        by.sort_by(|a, b| b.1.cmp(a.1));
        let parts: Vec<String> = by.iter().take(6).map(|(what, n)| format!("{what}: {n}")).collect();
        let _ = writeln!(md, "\n- **{kind}**: {}", parts.join("; "));
    }
    if !r.examples.is_empty() {
        let _ = writeln!(md, "\nExamples (first of each kind):\n");
        let mut shown: BTreeMap<&str, usize> = BTreeMap::new();
        for e in &r.examples {
            let n = shown.entry(e.kind.as_str()).or_insert(0);
            *n += 1;
            if *n > 3 {
                continue;
            }
            let key = e.key.as_deref().map(|k| format!(" key `{k}`")).unwrap_or_default();
            let _ = writeln!(md, "- {}: {}{key}", e.kind, e.detail);
        }
    }
    if !r.harness_notes.is_empty() {
        let _ = writeln!(md, "\nHarness notes: {}", r.harness_notes.join("; "));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::{check, CheckSettings};
    use crate::history::{
        Answer, AnsweredBy, EdgeDown, Fault, FaultKind, History, Op, OpKind, Outcome, Process, RssSample, Target, Why,
    };
    use crate::keys::{KeyId, KeySpace};
    use crate::report::{build, RunFacts, RunSettings};
    use crate::workload::WorkloadSettings;
    use std::time::Duration;

    /// A run's report with a false negative, a key never read back, a fault not injected, an
    /// observed stall, an origin and the edge over their memory limits, and the edge dead; the
    /// key space, and the key of the false negative.
    pub(crate) fn failed_run() -> (Report, KeySpace, KeyId) {
        let k = KeyId::written(1);
        let history = failed_history(k);
        let settings = CheckSettings {
            freshness: 3_000_000,
            edge_origin: 0,
            rss_limit_kib: 1 << 20,
            edge_rss_limit_kib: 512 << 10,
        };
        let result = check(&history, &settings);
        let keys = KeySpace::new(1);
        let facts = RunFacts {
            settings: run_settings(),
            skipped_ops: (0, 0),
            required_faults: [FaultKind::FlushAll].into(),
            floors: vec![],
            automatic_rebuilds: vec![],
            notes: vec![],
            logs: vec![],
        };
        (build(&history, &result, &keys, facts), keys, k)
    }

    /// `k` written and then answered "not seen", an observed Cassandra stall, memory samples,
    /// the edge dead.
    fn failed_history(k: KeyId) -> History {
        History {
            ops: vec![
                Op {
                    kind: OpKind::Write,
                    why: Why::Write,
                    target: Target::Origin(1),
                    start: 0,
                    end: 10,
                    keys: vec![k],
                    outcome: Outcome::Acked,
                },
                Op {
                    kind: OpKind::Lookup,
                    why: Why::ReadAfterWrite,
                    target: Target::Origin(0),
                    start: 20,
                    end: 30,
                    keys: vec![k],
                    outcome: Outcome::Answers(vec![Answer { seen: false, by: Some(AnsweredBy::Filter) }]),
                },
            ],
            faults: vec![Fault {
                kind: FaultKind::ObservedCassandraStall,
                start: 100,
                end: 2_000_100,
                origin: None,
                recovered: None,
                note: "probe took 2000 ms (threshold 750 ms; 1 slow probes), then answered in 3 ms".into(),
                copy_held: None,
            }],
            rss: vec![
                RssSample { process: Process::Origin(0), pid: 1, at: 5, kib: 30 * 1024 },
                RssSample { process: Process::EdgeWorker, pid: 2, at: 5, kib: 600 * 1024 },
            ],
            edge_down: Some(EdgeDown {
                refused_since: 1_075_300_000,
                at: 1_080_300_000,
                not_sent: 140_615,
                note: "V8 fatal error; location = Reached heap limit".into(),
            }),
            ..History::default()
        }
    }

    /// A two-origin run with the edge.
    fn run_settings() -> RunSettings {
        let workload = WorkloadSettings {
            write_rate: 1.0,
            read_rate: 1.0,
            edge_read_rate: 1.0,
            batch_rate: 1.0,
            batch_write_keys: 1,
            batch_lookup_keys: 1,
            delete_rate: 0.0,
            delete_after_write_share: 0.0,
            readd_share: 0.0,
            absent_share: 0.5,
            freshness: Duration::from_secs(3),
            max_in_flight: 1,
        };
        RunSettings {
            command: "bloomgate-chaos run".into(),
            seed: 1,
            keyspace: "chaos_x".into(),
            filter: "chaos".into(),
            origins: 2,
            edge: true,
            freshness_secs: 3,
            schedule: crate::schedule::Schedule::Full,
            planted_bug: None,
            rss_limit_mib: 512,
            edge_rss_limit_mib: 512,
            workload,
        }
    }

    #[test]
    fn the_summary_says_what_failed_first_and_lists_observed_stalls_apart() {
        let (report, keys, k) = failed_run();
        assert!(!report.passed);
        assert_eq!(report.violation_counts["false_negative_origin"], 1);
        assert_eq!(report.violation_counts["lost_write"], 1, "never read back");
        assert_eq!(report.faults_missing, vec!["flushall"]);
        assert_eq!(report.examples[0].key.as_deref(), Some(keys.hex(k).as_str()));
        let md = markdown(&report);
        for kind in ViolationKind::ALL {
            assert!(md.contains(kind.name()), "{md}");
        }
        assert!(md.contains("| flushall | **0** |"));
        assert_eq!(report.violation_counts["edge_down"], 1);
        assert_eq!(report.violation_counts["rss_over_limit"], 1);
        // The edge's death comes right after the verdict.
        let third = md.lines().nth(2).unwrap();
        assert!(third.starts_with("**The edge stopped answering at 1075.3 s**"), "{md}");
        assert!(third.contains("140615 were not sent") && third.contains("Reached heap limit"), "{third}");
        // Observed stalls: their own table, not required, not missing.
        assert_eq!(report.observed.len(), 1);
        assert_eq!(report.observed[0].outside_injected, 1);
        assert!(md.contains("| observed stall (not injected) |"), "{md}");
        assert!(md.contains("| observed_cassandra_stall | 1 | 2.0 | 1 | probe took 2000 ms"), "{md}");
        assert!(md.contains("origin-0 30 MiB, edge workerd 600 MiB"), "{md}");
        assert!(serde_json::to_string(&report).is_ok());
    }
}
