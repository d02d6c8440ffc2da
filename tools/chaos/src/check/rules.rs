//! The rules, one function each, over one operation or one kind of end-of-run evidence.

use super::deletes::{Deleted, Deletes};
use super::excuses::{ErrorKind, Failed};
use super::windows::{error_kind, FaultWindows};
use super::{secs, CheckSettings, Verdicts, Violation, ViolationKind};
use crate::history::{Answer, AnsweredBy, History, Micros, Op, OpKind, Outcome, Target};
use crate::keys::KeyId;
use std::collections::{HashMap, HashSet};

/// Who acknowledged what, when; which keys anyone ever tried to write, and which were deleted.
pub(super) struct Writes {
    /// Each key's earliest acknowledgement that no delete could have undone (every delete of the
    /// key ended before that write started): (its end, the operation's index).
    pub(super) acked: HashMap<KeyId, (Micros, usize)>,
    attempted: HashSet<KeyId>,
    /// Keys a delete was sent for.
    deleted: HashSet<KeyId>,
}

impl Writes {
    pub(super) fn of(history: &History) -> Writes {
        let mut last_delete: HashMap<KeyId, Micros> = HashMap::new();
        for op in history.ops.iter().filter(|op| op.kind == OpKind::Delete) {
            for key in &op.keys {
                let end = last_delete.entry(*key).or_insert(op.end);
                *end = (*end).max(op.end);
            }
        }
        let mut acked: HashMap<KeyId, (Micros, usize)> = HashMap::new();
        let mut attempted: HashSet<KeyId> = HashSet::new();
        for (i, op) in history.ops.iter().enumerate().filter(|(_, op)| op.kind.is_write()) {
            attempted.extend(op.keys.iter().copied());
            if op.outcome != Outcome::Acked {
                continue;
            }
            // A delete that had not ended when the write started may have taken effect after it.
            for key in op.keys.iter().filter(|k| last_delete.get(*k).is_none_or(|end| *end < op.start)) {
                let entry = acked.entry(*key).or_insert((op.end, i));
                if op.end < entry.0 {
                    *entry = (op.end, i);
                }
            }
        }
        Writes { acked, attempted, deleted: last_delete.into_keys().collect() }
    }

    /// Whether a lookup answer "not seen" for `key` may be a false positive's "maybe" rather
    /// than a certain "no": nobody ever tried to write it.
    fn never_written(&self, key: &KeyId) -> bool {
        !self.attempted.contains(key)
    }
}

/// What the per-operation rules read besides the operation.
pub(super) struct Context<'a> {
    pub(super) history: &'a History,
    pub(super) settings: &'a CheckSettings,
    pub(super) writes: &'a Writes,
    pub(super) deletes: &'a Deletes,
    pub(super) windows: &'a FaultWindows,
}

impl Context<'_> {
    /// From when the edge counts as dead: the first refusal of the run that made the harness
    /// give up on it.
    fn edge_dead_from(&self) -> Option<Micros> {
        self.history.edge_down.as_ref().map(|d| d.refused_since)
    }

    /// Whether the filter must have answered "maybe" (or could not answer) for some key of `op`.
    fn asks_a_maybe(&self, op: &Op) -> bool {
        op.keys.iter().any(|k| !self.writes.never_written(k)) || self.windows.filter_unavailable(op.start, op.end)
    }
}

/// The operation's status: an answer of the right shape, or an error the excuse table allows.
pub(super) fn status(v: &mut Verdicts, cx: &Context<'_>, i: usize, op: &Op) {
    let what = format!("{} via {} ({})", op.kind.name(), op.target, op.why.name());
    let violation = |kind, detail: String| Violation {
        kind,
        at: op.start,
        target: Some(op.target),
        key: op.keys.first().copied(),
        op: Some(i),
        detail: format!("{what} from {} to {}: {detail}", secs(op.start), secs(op.end)),
    };
    if op.kind.is_lookup()
        && op.keys.iter().all(|k| cx.writes.never_written(k))
        && cx.windows.database_down(op.start, op.end)
    {
        v.never_written_lookups_in_database_faults += 1;
    }
    match &op.outcome {
        Outcome::Acked if op.kind.is_write() || op.kind == OpKind::Delete => return,
        Outcome::Answers(answers) if op.kind.is_lookup() && answers.len() == op.keys.len() => return,
        Outcome::Acked | Outcome::Answers(_) => {
            let detail = "an answer of the wrong shape for the call".to_owned();
            return v.add(violation(ViolationKind::BadStatus, detail), "wrong shape".into());
        }
        Outcome::Status { code, retry_after: false, detail } if *code == 503 || *code == 429 => {
            let d = format!("{code} without Retry-After: {detail}");
            return v.add(violation(ViolationKind::MissingRetryAfter, d), format!("{code} via {}", op.target));
        }
        Outcome::Status { code, detail, .. } if *code != 503 && *code != 429 => {
            let d = format!("status {code}: {detail}");
            return v.add(violation(ViolationKind::BadStatus, d), format!("{code} {}", op.kind.name()));
        }
        Outcome::Status { .. } | Outcome::Transport { .. } => {}
    }
    let Some(error) = error_kind(&op.outcome) else { return };
    let failed =
        Failed { target: op.target, kind: op.kind, error, start: op.start, end: op.end, maybe: cx.asks_a_maybe(op) };
    let label = format!("{} {} {}", target_class(op.target), op.kind.name(), error.name());
    if let Some(fault) = cx.windows.excused_by(&failed) {
        return v.excuse(fault, label);
    }
    if let (Outcome::Transport { .. }, Target::Edge) = (&op.outcome, op.target) {
        if cx.edge_dead_from().is_some_and(|from| op.start >= from) {
            // Counted once, as the edge's death (see `edge_down`).
            v.result.checked.edge_down_failures += 1;
            return;
        }
    }
    let lookup_503 = op.kind.is_lookup() && error == ErrorKind::Unavailable;
    if lookup_503 && !failed.maybe && cx.windows.database_down(op.start, op.end) {
        // Never-written keys only, while the database was down: the filter's false positive
        // ("maybe") would fail the same way. Allowed up to a budget (see `false_positives`).
        v.false_positive_candidates.push((i, label));
        return;
    }
    match &op.outcome {
        Outcome::Transport { error } => {
            let d = format!("no answer: {error}");
            v.add(violation(ViolationKind::TransportError, d), op.target.to_string());
        }
        Outcome::Status { code, detail, .. } => {
            let d = format!("{code} that no fault in the excuse table explains: {detail}");
            v.add(violation(ViolationKind::ErrorNotExcused, d), label);
        }
        _ => {}
    }
}

/// `origin` or `edge`, as the excuse report groups errors.
pub(super) fn target_class(target: Target) -> &'static str {
    match target {
        Target::Origin(_) => "origin",
        Target::Edge => "edge",
    }
}

/// The database-down failures of lookups of never-written keys alone: allowed up to the
/// false-positive budget (excuses::FALSE_POSITIVE_BUDGET plus a share of those lookups), the
/// rest are violations.
pub(super) fn false_positives(v: &mut Verdicts, history: &History) {
    use super::excuses::{FALSE_POSITIVE_BUDGET, FALSE_POSITIVE_SHARE};
    let budget = FALSE_POSITIVE_BUDGET
        + (FALSE_POSITIVE_SHARE * v.never_written_lookups_in_database_faults as f64).ceil() as u64;
    let candidates = std::mem::take(&mut v.false_positive_candidates);
    for (n, (i, label)) in candidates.into_iter().enumerate() {
        if (n as u64) < budget {
            v.result.checked.excused_as_false_positives += 1;
            v.result.checked.excused_errors += 1;
            continue;
        }
        let op = &history.ops[i];
        let detail = format!(
            "{} via {} from {} to {}: 503 for never-written keys only while the database was down, past the \
             false-positive budget of {budget}: the filter should have ruled them out",
            op.kind.name(),
            op.target,
            secs(op.start),
            secs(op.end)
        );
        let violation = Violation {
            kind: ViolationKind::ErrorNotExcused,
            at: op.start,
            target: Some(op.target),
            key: op.keys.first().copied(),
            op: Some(i),
            detail,
        };
        v.add(violation, format!("{label} (never-written keys)"));
    }
}

/// One key's answer: "seen" where it must be, never "seen" for a key nobody wrote or one an
/// acknowledged delete removed.
pub(super) fn answer(v: &mut Verdicts, cx: &Context<'_>, i: usize, op: &Op, key: KeyId, answer: Answer) {
    v.result.checked.answers += 1;
    if op.target == Target::Edge && answer.by == Some(AnsweredBy::Edge) && !answer.seen {
        v.result.checked.edge_no_answers += 1;
    }
    if cx.writes.never_written(&key) {
        v.result.checked.must_not_be_seen += 1;
        if answer.seen {
            let detail = format!(
                "{} answered seen=true (by {}) at {} for {key}, which nobody ever tried to write",
                op.target,
                answer.by_name(),
                secs(op.start)
            );
            let violation = Violation {
                kind: ViolationKind::SeenNeverWritten,
                at: op.start,
                target: Some(op.target),
                key: Some(key),
                op: Some(i),
                detail,
            };
            v.add(violation, format!("{} by {}", op.target, answer.by_name()));
        }
        return;
    }
    if let Some(deleted) = cx.deletes.must_be_gone(&key, op.start, op.end) {
        return deleted_answer(v, cx, i, op, key, answer, deleted);
    }
    let Some(&(ack, write)) = cx.writes.acked.get(&key) else {
        v.result.checked.unconstrained += 1;
        return;
    };
    let (deadline, kind) = match op.target {
        Target::Origin(_) => (ack, ViolationKind::FalseNegativeOrigin),
        Target::Edge => (ack + cx.settings.freshness, ViolationKind::FalseNegativeEdge),
    };
    if deadline >= op.start {
        v.result.checked.unconstrained += 1;
        return;
    }
    match op.target {
        Target::Origin(o) => {
            v.result.checked.must_be_seen_origin += 1;
            *v.result.checked.must_be_seen_by_origin.entry(o).or_default() += 1;
        }
        Target::Edge => v.result.checked.must_be_seen_edge += 1,
    }
    if cx.writes.deleted.contains(&key) {
        v.result.checked.must_be_seen_readded += 1;
    }
    if !answer.seen {
        let w = &cx.history.ops[write];
        let detail = format!(
            "{} answered seen=false (by {}) at {} for {key}, acknowledged {:.1} ms before the lookup started ({:?} via {}, {} to {})",
            op.target,
            answer.by_name(),
            secs(op.start),
            (op.start - ack) as f64 / 1000.0,
            w.kind,
            w.target,
            secs(w.start),
            secs(w.end),
        );
        let violation = Violation { kind, at: op.start, target: Some(op.target), key: Some(key), op: Some(i), detail };
        let label = format!("{} by {}, {}, written via {}", op.target, answer.by_name(), op.why.name(), w.target);
        v.add(violation, label);
    }
}

/// An answer that had to be "not seen": its key's delete was acknowledged before the lookup
/// started, and no write of it may be ordered after that delete (see [`super::deletes`]).
fn deleted_answer(v: &mut Verdicts, cx: &Context<'_>, i: usize, op: &Op, key: KeyId, answer: Answer, d: Deleted) {
    v.result.checked.must_be_not_seen_after_delete += 1;
    if !answer.seen {
        return;
    }
    let delete = &cx.history.ops[d.delete];
    let written = match d.last_write.map(|w| &cx.history.ops[w]) {
        Some(w) => format!(
            "its last write ({} via {}, {} to {}) was acknowledged {:.1} ms before the delete was sent",
            w.kind.name(),
            w.target,
            secs(w.start),
            secs(w.end),
            (delete.start - w.end) as f64 / 1000.0,
        ),
        None => "it had not been written before the delete".to_owned(),
    };
    let detail = format!(
        "{} answered seen=true (by {}) at {} for {key}, deleted via {} (sent {}, acknowledged {}, {:.1} ms before \
         the lookup started); {written}, and no write of it was sent before the lookup ended",
        op.target,
        answer.by_name(),
        secs(op.start),
        delete.target,
        secs(delete.start),
        secs(delete.end),
        (op.start - delete.end) as f64 / 1000.0,
    );
    let violation = Violation {
        kind: ViolationKind::DeletedButSeen,
        at: op.start,
        target: Some(op.target),
        key: Some(key),
        op: Some(i),
        detail,
    };
    let label = format!("{} by {}, {}, deleted via {}", op.target, answer.by_name(), op.why.name(), delete.target);
    v.add(violation, label);
}

/// Every acknowledged key no delete could have undone is in Cassandra at the end.
pub(super) fn durability(v: &mut Verdicts, history: &History, writes: &Writes) {
    let read_back: HashMap<KeyId, Option<bool>> = history.db_checks.iter().map(|c| (c.key, c.present)).collect();
    let mut durable: Vec<(&KeyId, &(Micros, usize))> = writes.acked.iter().collect();
    durable.sort_unstable_by_key(|(_, (at, _))| *at);
    for (key, (at, op)) in durable {
        v.result.checked.db_keys += 1;
        let problem = match read_back.get(key) {
            Some(Some(true)) => continue,
            Some(Some(false)) => "is not in Cassandra",
            Some(None) => "could not be read from Cassandra",
            None => "was not read back from Cassandra",
        };
        let detail = format!("{key} acknowledged at {} {problem} at the end of the run", secs(*at));
        let violation = Violation {
            kind: ViolationKind::LostWrite,
            at: *at,
            target: Some(history.ops[*op].target),
            key: Some(*key),
            op: Some(*op),
            detail,
        };
        v.add(violation, problem.to_owned());
    }
}

/// Every origin's and the edge's RSS under its limit.
pub(super) fn memory(v: &mut Verdicts, history: &History, settings: &CheckSettings) {
    for sample in &history.rss {
        v.result.checked.rss_samples += 1;
        let limit = match sample.process.target() {
            Target::Origin(_) => settings.rss_limit_kib,
            Target::Edge => settings.edge_rss_limit_kib,
        };
        if sample.kib > limit {
            let detail = format!(
                "{} (pid {}) had {} MiB resident at {}, limit {} MiB",
                sample.process,
                sample.pid,
                sample.kib / 1024,
                secs(sample.at),
                limit / 1024
            );
            let violation = Violation {
                kind: ViolationKind::RssOverLimit,
                at: sample.at,
                target: Some(sample.process.target()),
                key: None,
                op: None,
                detail,
            };
            v.add(violation, sample.process.to_string());
        }
    }
}

/// Faults the origins promise to repair are followed by a new generation in time.
pub(super) fn repairs(v: &mut Verdicts, history: &History) {
    for fault in history.faults.iter().filter(|f| f.kind.repaired_automatically()) {
        match fault.recovered {
            None => continue,
            Some(true) => v.result.checked.repairs_awaited += 1,
            Some(false) => {
                v.result.checked.repairs_awaited += 1;
                let detail = format!(
                    "{} at {}: no new filter generation by {} ({})",
                    fault.kind.name(),
                    secs(fault.start),
                    secs(fault.end),
                    fault.note
                );
                let violation = Violation {
                    kind: ViolationKind::NotRepaired,
                    at: fault.start,
                    target: None,
                    key: None,
                    op: None,
                    detail,
                };
                v.add(violation, fault.kind.name().to_owned());
            }
        }
    }
}

/// No panic in any log.
pub(super) fn panics(v: &mut Verdicts, history: &History) {
    for line in &history.panics {
        let violation = Violation {
            kind: ViolationKind::Panic,
            at: 0,
            target: None,
            key: None,
            op: None,
            detail: format!("{}: {}", line.source, line.line),
        };
        v.add(violation, line.source.clone());
    }
}

/// The edge answered to the end: its death is one violation, whatever it cost (the
/// operations that failed after it, and those not sent, are counted in it).
pub(super) fn edge_down(v: &mut Verdicts, history: &History) {
    let Some(down) = &history.edge_down else { return };
    let how = if down.note.is_empty() { String::new() } else { format!("; its log ends: {}", down.note) };
    let detail = format!(
        "the edge stopped answering at {}: every connection refused until the harness gave up on it at {}; \
         {} edge operations failed from then on and {} were not sent{how}",
        secs(down.refused_since),
        secs(down.at),
        v.result.checked.edge_down_failures,
        down.not_sent,
    );
    let violation = Violation {
        kind: ViolationKind::EdgeDown,
        at: down.refused_since,
        target: Some(Target::Edge),
        key: None,
        op: None,
        detail,
    };
    v.add(violation, "connection refused".into());
}
