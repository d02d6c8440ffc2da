//! A rebuild's runs, shared: a filter larger than a rebuild's memory budget is built in runs of
//! segments, one whole scan each (`rebuild::fill`), and the runs are independent, so any origin
//! may build one. The rebuild that named the generation posts its runs on a board in the filter
//! store; every builder (it, and other origins helping) claims a run for a while, scans it,
//! merges it into the generation, and marks it done with the keys its scan read. The switch
//! waits for every run to be done. Pure: the board as stored, read and written.
//!
//! Why sharing cannot lose a key: a run is claimed only from a board posted after the
//! generation was named, so every run's scan starts after the naming (the argument of
//! `rebuild`'s module doc holds for each); merging is an OR, so a run built twice (a claim that
//! expired under a slow builder) is only redundant; a run is marked done only after its last
//! segment was merged; and a generation abandoned meanwhile has its segments deleted, so a late
//! merge into it fails instead of resurrecting it.
//!
//! Versioned from its first day: the plan carries [`RUN_PLAN_FORMAT`], and a board in a newer
//! format is left alone (this origin does not help; the rebuild that posted it builds on).

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::ops::Range;

/// The format of the plans this build posts, and the newest it reads.
pub const RUN_PLAN_FORMAT: u32 = 1;

/// The runs a rebuild posted: each a range of segment indexes, built by one scan.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunPlan {
    /// The plan's format.
    pub format: u32,
    /// The runs, in order; a run's number is its index here.
    pub runs: Vec<Range<u32>>,
    /// Bytes of bits one run holds at most: a helper whose own budget is smaller declines.
    pub run_bytes: u64,
}

impl RunPlan {
    /// A plan of this build's format.
    pub fn new(runs: Vec<Range<u32>>, run_bytes: u64) -> RunPlan {
        RunPlan { format: RUN_PLAN_FORMAT, runs, run_bytes }
    }

    /// The plan as stored.
    pub fn encode(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// A stored plan; an error names what is wrong with it (unreadable, or a newer format).
    pub fn decode(stored: &str) -> Result<RunPlan, String> {
        #[derive(Deserialize)]
        struct Format {
            format: u32,
        }
        let format = serde_json::from_str::<Format>(stored).map_err(|e| format!("unreadable run plan: {e}"))?.format;
        if format > RUN_PLAN_FORMAT {
            return Err(format!(
                "run plan format {format} is newer than this build reads ({RUN_PLAN_FORMAT}); left to the origins that posted it"
            ));
        }
        serde_json::from_str(stored).map_err(|e| format!("unreadable run plan: {e}"))
    }
}

/// A board as read: the plan, and the runs done with the keys each one's scan read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunBoard {
    /// What was posted.
    pub plan: RunPlan,
    /// Runs done, by number: the keys the scan that built it read.
    pub done: BTreeMap<u32, u64>,
}

/// The board's hash field holding the plan.
pub const PLAN_FIELD: &str = "plan";

/// The board's hash field marking run `index` done (its value: the keys scanned).
pub fn done_field(index: u32) -> String {
    format!("done:{index}")
}

impl RunBoard {
    /// A board from its stored fields; None if no plan was posted (nothing to help with).
    pub fn from_fields(fields: &[(String, String)]) -> Result<Option<RunBoard>, String> {
        let Some((_, plan)) = fields.iter().find(|(name, _)| name == PLAN_FIELD) else { return Ok(None) };
        let plan = RunPlan::decode(plan)?;
        let mut done = BTreeMap::new();
        for (name, value) in fields {
            let Some(index) = name.strip_prefix("done:") else { continue };
            let index: u32 = index.parse().map_err(|_| format!("unreadable run board field {name:?}"))?;
            if index as usize >= plan.runs.len() {
                return Err(format!("run {index} marked done, but the plan has {} runs", plan.runs.len()));
            }
            done.insert(index, value.parse().map_err(|_| format!("unreadable key count {value:?} of run {index}"))?);
        }
        Ok(Some(RunBoard { plan, done }))
    }

    /// The runs not yet done, in order.
    pub fn undone(&self) -> impl Iterator<Item = u32> + '_ {
        (0..self.plan.runs.len() as u32).filter(|index| !self.done.contains_key(index))
    }

    /// Whether every run is done: the generation is filled.
    pub fn all_done(&self) -> bool {
        self.done.len() == self.plan.runs.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect()
    }

    #[test]
    fn a_plan_reads_back_as_posted() {
        let plan = RunPlan::new(vec![0..4, 4..8, 8..9], 1 << 20);
        assert_eq!(RunPlan::decode(&plan.encode()), Ok(plan));
    }

    #[test]
    fn a_plan_in_a_newer_format_is_refused_with_the_reason() {
        let newer = r#"{"format":2,"runs":[],"run_bytes":0,"what":"next"}"#;
        let err = RunPlan::decode(newer).unwrap_err();
        assert!(err.contains("format 2 is newer"), "{err}");
        assert!(RunPlan::decode("{").unwrap_err().contains("unreadable"));
    }

    #[test]
    fn the_board_knows_which_runs_are_left() {
        let plan = RunPlan::new(vec![0..2, 2..4, 4..6], 64);
        let board = RunBoard::from_fields(&fields(&[("plan", &plan.encode()), ("done:1", "17")])).unwrap().unwrap();
        assert_eq!(board.undone().collect::<Vec<_>>(), vec![0, 2]);
        assert!(!board.all_done());
        assert_eq!(board.done.get(&1), Some(&17));
        let all = fields(&[("plan", &plan.encode()), ("done:0", "1"), ("done:1", "2"), ("done:2", "3")]);
        assert!(RunBoard::from_fields(&all).unwrap().unwrap().all_done());
    }

    #[test]
    fn no_plan_is_no_board_and_a_bad_field_is_an_error() {
        assert_eq!(RunBoard::from_fields(&[]), Ok(None));
        let plan = RunPlan::new(vec![0..2, 2..4], 64).encode();
        assert!(RunBoard::from_fields(&fields(&[("plan", &plan), ("done:5", "1")])).is_err());
        assert!(RunBoard::from_fields(&fields(&[("plan", &plan), ("done:0", "x")])).is_err());
        assert!(RunBoard::from_fields(&fields(&[("plan", &plan), ("done:y", "1")])).is_err());
    }
}
