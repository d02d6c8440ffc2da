//! The edge cut off until the insert journal no longer holds what it held when the cut began:
//! every copy the edge holds is then behind the journal's retention, and the edge must reload
//! (a 410 for its catch-up, segments fetched whole). Timed by the journal itself, not by a
//! guess at the write rate, so a fault overlapping the cut that refuses writes for a while
//! only makes it longer.

use super::Faults;
use crate::history::FaultKind;
use crate::schedule::EDGE_CUT_MAX;
use anyhow::Context as _;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// The shortest cut: the edge's manifest expires (S) and its refreshes fail for a while.
const EDGE_CUT_MIN: Duration = Duration::from_secs(6);

/// `entries-added` and `length` of a stream, from an `XINFO STREAM` reply.
pub(super) fn stream_counts(reply: &redis::Value) -> Option<(u64, u64)> {
    let pairs: Vec<(&redis::Value, &redis::Value)> = match reply {
        redis::Value::Array(items) => items.chunks(2).filter_map(|p| Some((p.first()?, p.get(1)?))).collect(),
        redis::Value::Map(map) => map.iter().map(|(k, v)| (k, v)).collect(),
        _ => return None,
    };
    let field = |name: &str| {
        pairs.iter().find_map(|(k, v)| match (k, v) {
            (redis::Value::BulkString(k), redis::Value::Int(n)) if k == name.as_bytes() => u64::try_from(*n).ok(),
            (redis::Value::SimpleString(k), redis::Value::Int(n)) if k == name => u64::try_from(*n).ok(),
            _ => None,
        })
    };
    Some((field("entries-added")?, field("length")?))
}

impl Faults {
    /// Cuts the edge off its origin until every journal entry of the active generation up to
    /// the cut has been trimmed (at least [`EDGE_CUT_MIN`], at most [`EDGE_CUT_MAX`]).
    pub(super) async fn edge_behind_journal(&self) -> anyhow::Result<()> {
        let edge = self.cluster.edge.as_ref().context("no edge")?;
        let stats = self.stats_within(self.settings.recovery_wait).await?;
        let generation = stats["generation"].as_u64().context("no active generation")?;
        let key = format!("bg:{{{}}}:jnl:{generation}", self.filter);
        let counts = |reply: anyhow::Result<redis::Value>| reply.ok().as_ref().and_then(stream_counts);
        let (head, _) = counts(self.redis_command(redis::cmd("XINFO").arg("STREAM").arg(&key)).await)
            .with_context(|| format!("no journal {key}"))?;
        let start = self.rec.now();
        let cut_at = Instant::now();
        self.workload.edge_cut.store(true, Ordering::SeqCst);
        edge.proxy.cut();
        let mut trimmed = false;
        while cut_at.elapsed() < EDGE_CUT_MAX {
            tokio::time::sleep(Duration::from_millis(500)).await;
            // The first entry the journal still holds is number added - length + 1.
            let now = counts(self.redis_command(redis::cmd("XINFO").arg("STREAM").arg(&key)).await);
            trimmed = trimmed || now.is_none_or(|(added, length)| added - length > head);
            if trimmed && cut_at.elapsed() >= EDGE_CUT_MIN {
                break;
            }
        }
        edge.proxy.heal();
        self.workload.edge_cut.store(false, Ordering::SeqCst);
        let how = if trimmed { "until the journal no longer held" } else { "but the journal still held" };
        let note = format!(
            "edge to origin-0 cut for {:.1} s, {how} entry {head} of generation {generation}'s, the last before the cut",
            cut_at.elapsed().as_secs_f64()
        );
        self.record(FaultKind::EdgeCut, start, Some(crate::cluster::EDGE_ORIGIN), None, note);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use redis::Value;

    #[test]
    fn counts_are_read_from_xinfo_stream() {
        let bulk = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        let reply = Value::Array(vec![
            bulk("length"),
            Value::Int(57),
            bulk("radix-tree-keys"),
            Value::Int(1),
            bulk("entries-added"),
            Value::Int(940),
            bulk("last-generated-id"),
            bulk("1796-0"),
        ]);
        assert_eq!(stream_counts(&reply), Some((940, 57)));
        assert_eq!(stream_counts(&Value::Array(vec![bulk("length"), Value::Int(1)])), None);
        assert_eq!(stream_counts(&Value::Nil), None);
    }
}
