//! A delete held to its word (DESIGN.md invariant 12): once a delete of a key is acknowledged,
//! every lookup that starts afterwards answers "not seen", unless some write of the key may be
//! ordered after the delete.
//!
//! A write may be ordered after a delete if it was not acknowledged (its effect may land at any
//! time), if it had not ended when the delete was sent (the two were concurrent), or if it was
//! sent after the delete was sent. So, for an answer to lookup L of key k: take the acknowledged
//! delete D of k that ended before L started and was sent last; the answer must be "not seen"
//! iff every write of k sent before L ended was acknowledged before D was sent. Writes sent
//! after L ended cannot have reached it and do not count.
//!
//! This never asks for "not seen" where the "seen" rules ask for "seen": those start from a
//! write acknowledged before the lookup that started after every delete of the key had ended,
//! which is a write this rule would find not acknowledged before D was sent.

use crate::history::{History, Micros, OpKind, Outcome};
use crate::keys::KeyId;
use std::collections::HashMap;

/// An operation's window and its index in the history.
#[derive(Clone, Copy, Debug)]
struct Window {
    start: Micros,
    end: Micros,
    op: usize,
}

/// What one deleted key went through: its acknowledged deletes and every write of it.
#[derive(Debug, Default)]
struct Timeline {
    deletes: Vec<Window>,
    /// Each write, and whether it was acknowledged.
    writes: Vec<(Window, bool)>,
}

/// Why an answer had to be "not seen": the delete that holds it, and the key's last write
/// before that delete was sent (none if the key had not been written before it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Deleted {
    /// The delete's operation.
    pub(super) delete: usize,
    /// The last acknowledged write before it, if any.
    pub(super) last_write: Option<usize>,
}

/// The acknowledged deletes of a history and the writes of the keys they deleted.
pub(super) struct Deletes {
    keys: HashMap<KeyId, Timeline>,
}

impl Deletes {
    pub(super) fn of(history: &History) -> Deletes {
        let mut keys: HashMap<KeyId, Timeline> = HashMap::new();
        let acked_deletes =
            history.ops.iter().enumerate().filter(|(_, op)| op.kind == OpKind::Delete && op.outcome == Outcome::Acked);
        for (i, op) in acked_deletes {
            for key in &op.keys {
                keys.entry(*key).or_default().deletes.push(Window { start: op.start, end: op.end, op: i });
            }
        }
        for (i, op) in history.ops.iter().enumerate().filter(|(_, op)| op.kind.is_write()) {
            let acked = op.outcome == Outcome::Acked;
            for key in &op.keys {
                if let Some(timeline) = keys.get_mut(key) {
                    timeline.writes.push((Window { start: op.start, end: op.end, op: i }, acked));
                }
            }
        }
        Deletes { keys }
    }

    /// Whether an answer for `key` to a lookup from `start` to `end` must be "not seen", and
    /// which delete says so.
    pub(super) fn must_be_gone(&self, key: &KeyId, start: Micros, end: Micros) -> Option<Deleted> {
        let timeline = self.keys.get(key)?;
        // Of the deletes acknowledged before the lookup, the one sent last leaves the fewest
        // writes that could be ordered after it.
        let delete = timeline.deletes.iter().filter(|d| d.end < start).max_by_key(|d| d.start)?;
        let mut last_write: Option<Window> = None;
        for (write, acked) in timeline.writes.iter().filter(|(w, _)| w.start < end) {
            if !acked || write.end >= delete.start {
                return None;
            }
            if last_write.is_none_or(|last| write.end > last.end) {
                last_write = Some(*write);
            }
        }
        Some(Deleted { delete: delete.op, last_write: last_write.map(|w| w.op) })
    }
}
