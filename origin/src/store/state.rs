//! A filter's generations and which of them readers and writers may use: the small, pure
//! core of "no false negative through rebuilds, rollbacks and faults".
//!
//! A *generation* is one complete set of a filter's bits. The state names at most three:
//!
//! - `active`: what lookups read;
//! - `building`: what a rebuild is filling from the database;
//! - `previous`: what the last switch replaced, until it is *retired*.
//!
//! Every add reaches every generation the state names (see [`FilterState::write_targets`]),
//! `previous` included: an origin may still read it from its metadata cache after the switch,
//! so it must keep receiving adds until its bits are made unreadable (retired) *before* the
//! state stops naming it. Hence a reader holding any generation, cached or fresh, either finds
//! every acknowledged key in it or finds it gone and falls through to the database.
//!
//! Each generation also records the *incarnation* of the filter store that holds its bits (for
//! Redis, its `run_id`). A Redis restarted from a snapshot, or a replica promoted in its place,
//! keeps the keys but may have lost recent bits, and a new process has a new run id: bits of
//! another incarnation are never read, never written, and never served to an edge.

use bloomgate_filter::Params;
use serde::{Deserialize, Serialize};

/// One generation of a filter's bits, as recorded in the filter state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FilterMeta {
    /// The generation's number: ms since the Unix epoch when it was named, never reused.
    pub generation: u64,
    /// Params of that generation.
    pub params: Params,
    /// The filter store process that holds these bits (see the module doc); 0 in states
    /// written before incarnations were recorded, which no live store matches.
    #[serde(default)]
    pub incarnation: u64,
    /// Whether this generation keeps an insert journal: decided when it is named (by the
    /// naming origin's `journal_enabled`) and the same for every origin after, so every add to
    /// it appends, whatever the adding origin's own setting. Were it each origin's own
    /// setting, an origin with the journal off would set bits the journal never names, and an
    /// edge catching up from it would answer "no" for a key that origin acknowledged.
    #[serde(default)]
    pub journal: bool,
}

/// Which generations a filter has (see the module doc).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FilterState {
    /// Read by lookups. None while a filter is being recovered: lookups fall through.
    pub active: Option<FilterMeta>,
    /// Being built; adds go here too.
    pub building: Option<FilterMeta>,
    /// Replaced by the last switch; still takes adds until it is retired.
    pub previous: Option<FilterMeta>,
    /// When `previous` was replaced, ms since the Unix epoch (for retiring it after the
    /// grace period even if the origin that switched died meanwhile).
    #[serde(default)]
    pub previous_since_ms: Option<u64>,
    /// Bumped by every change: changes are compare-and-set on it, so two origins never
    /// overwrite each other's transition.
    #[serde(default)]
    pub revision: u64,
    /// The incarnation of the filter store this state was read from (not stored).
    #[serde(skip)]
    pub read_from: u64,
}

impl FilterState {
    /// Whether `meta`'s bits live in the store this state was read from.
    pub fn is_current(&self, meta: &FilterMeta) -> bool {
        meta.incarnation == self.read_from
    }

    /// Every generation the state names, in the order active, building, previous.
    pub fn named(&self) -> impl Iterator<Item = FilterMeta> + '_ {
        [self.active, self.building, self.previous].into_iter().flatten()
    }

    /// The generations an add must reach: every one the state names whose bits are in this
    /// store. Empty means no write can be acknowledged now.
    pub fn write_targets(&self) -> impl Iterator<Item = FilterMeta> + '_ {
        self.named().filter(|m| self.is_current(m))
    }

    /// The generation lookups may read, if its bits are in this store.
    pub fn readable(&self) -> Option<FilterMeta> {
        self.active.filter(|m| self.is_current(m))
    }

    /// Generations of another incarnation: their bits may have lost acknowledged adds.
    pub fn stale(&self) -> impl Iterator<Item = FilterMeta> + '_ {
        self.named().filter(|m| !self.is_current(m))
    }

    /// The current-incarnation generation with this number, if the state names it.
    pub fn generation(&self, generation: u64) -> Option<FilterMeta> {
        self.write_targets().find(|m| m.generation == generation)
    }

    /// Whether the active generation exists but its store has changed since it was built.
    pub fn active_is_stale(&self) -> bool {
        self.active.is_some_and(|m| !self.is_current(&m))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(generation: u64, incarnation: u64) -> Option<FilterMeta> {
        Some(FilterMeta { generation, params: Params::new(1, 6, 0, 2).unwrap(), incarnation, journal: true })
    }

    #[test]
    fn every_named_generation_of_this_store_takes_adds_the_replaced_one_included() {
        let state = FilterState {
            active: meta(3, 7),
            building: meta(4, 7),
            previous: meta(2, 7),
            read_from: 7,
            ..FilterState::default()
        };
        let targets: Vec<u64> = state.write_targets().map(|m| m.generation).collect();
        assert_eq!(targets, [3, 4, 2]);
        assert_eq!(state.readable().map(|m| m.generation), Some(3));
        assert_eq!(state.generation(2).map(|m| m.generation), Some(2));
    }

    #[test]
    fn bits_of_another_incarnation_are_neither_read_nor_written() {
        let state = FilterState { active: meta(3, 7), building: meta(4, 8), read_from: 8, ..FilterState::default() };
        assert_eq!(state.readable(), None, "a restarted or failed-over store may have lost bits");
        assert!(state.active_is_stale());
        assert_eq!(state.write_targets().map(|m| m.generation).collect::<Vec<_>>(), [4]);
        assert_eq!(state.stale().map(|m| m.generation).collect::<Vec<_>>(), [3]);
        assert_eq!(state.generation(3), None, "never served to an edge either");
    }

    #[test]
    fn states_written_before_incarnations_match_no_live_store() {
        let json = r#"{"active":{"generation":5,"params":{"seed":1,"k":6,"segment_blocks_log2":0,"segment_count":2}},"building":null,"previous":null}"#;
        let mut state: FilterState = serde_json::from_str(json).unwrap();
        state.read_from = 99;
        assert_eq!(state.active.unwrap().incarnation, 0);
        assert_eq!(state.readable(), None);
    }

    #[test]
    fn the_read_incarnation_is_not_stored() {
        let state = FilterState { active: meta(3, 7), read_from: 7, revision: 4, ..FilterState::default() };
        let json = serde_json::to_string(&state).unwrap();
        assert!(!json.contains("read_from"), "{json}");
        let back: FilterState = serde_json::from_str(&json).unwrap();
        assert_eq!(back.read_from, 0);
        assert_eq!(back.revision, 4);
    }
}
