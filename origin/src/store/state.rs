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
//!
//! A filter *dropped* leaves its state behind as a tombstone ([`Dropped`]): it names no
//! generation, tells every reader and writer that the filter is gone, and keeps what a filter
//! created again under the name must respect: generation numbers after every one the dropped
//! filter used, and its key format. Each creation starts a new *lineage*, which every later
//! state of that filter keeps: a write that finds another lineage after its database write than
//! before knows the filter was dropped (and maybe created again) meanwhile, and is not
//! acknowledged (see `gate::filters` for the whole argument).

use super::{FilterUnavailable, StoreResult};
use crate::lease::{LeaseTerms, ReadConsistency};
use bloomgate_filter::{KeyFormat, Params};
use serde::{Deserialize, Serialize};

/// The filter state's format: the one this build writes, and the newest it reads. Raise it
/// with every change to what a state holds (a field added, a meaning changed), so that an
/// origin meeting a state from a newer one refuses it instead of dropping what it does not
/// know on its next write (docs/operations.md, "Upgrading").
pub const STATE_FORMAT: u32 = 1;

/// The format of states stored before formats were numbered: the first.
fn first_format() -> u32 {
    1
}

/// Reads a stored state: its format first (a newer one is refused, never guessed at), then
/// every field strictly (a field this build does not know is an error, not silently dropped).
pub fn decode_state(json: &str) -> StoreResult<FilterState> {
    #[derive(Deserialize)]
    struct Format {
        #[serde(default = "first_format")]
        format: u32,
    }
    let bad = |e: serde_json::Error| FilterUnavailable::Error(format!("bad filter state: {e}"));
    let Format { format } = serde_json::from_str(json).map_err(bad)?;
    if format > STATE_FORMAT {
        return Err(FilterUnavailable::UnknownFormat {
            record: "the filter state",
            found: format,
            known: STATE_FORMAT,
        });
    }
    serde_json::from_str(json).map_err(bad)
}

/// One generation of a filter's bits, as recorded in the filter state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Generation {
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
    /// The read lease this generation was named with (`lease`): L and ρ, decided when it is
    /// named and the same for every origin after, so origins with other settings or versions
    /// cannot disagree: readers of this generation answer under these terms, and writers that
    /// add to it (or find it named) wait them out. None (named in `barrier` mode, or before
    /// leases were recorded): read behind the read barrier alone, and writes do not wait.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease: Option<LeaseTerms>,
}

/// Which generations a filter has (see the module doc).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FilterState {
    /// The format the state was written in ([`STATE_FORMAT`] when this build writes it; 1 in
    /// states written before formats were numbered). Read by [`decode_state`] first.
    #[serde(default = "first_format")]
    pub format: u32,
    /// Read by lookups. None while a filter is being recovered: lookups fall through.
    pub active: Option<Generation>,
    /// Being built; adds go here too.
    pub building: Option<Generation>,
    /// Replaced by the last switch; still takes adds until it is retired.
    pub previous: Option<Generation>,
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
    /// Which life of the filter's name this state belongs to: set when the filter is created
    /// (the number of its first generation, so lineages of a name only grow) and kept by every
    /// later change. 0 in states written before lineages were recorded.
    #[serde(default)]
    pub lineage: u64,
    /// Set when the filter was dropped: the state is then a tombstone naming no generation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dropped: Option<Dropped>,
    /// How origins answer "no" from their copies of this filter, as chosen when it was created
    /// (None: created before the choice was recorded, or the state was lost): every generation
    /// named for it records the terms of this mode. Kept by every later change, like `lineage`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_consistency: Option<ReadConsistency>,
}

/// What a dropped filter leaves for a filter created again under its name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Dropped {
    /// At least every generation number the dropped filter ever named (and the time of the
    /// drop, in ms): a filter created again numbers its generations after it, so no segment
    /// identity (generation, index, version), in an edge's cache or anywhere, can name bits of
    /// both.
    pub last_generation: u64,
    /// The dropped filter's key format: a filter created again under the name keeps it. Other
    /// origins may read keys with the old definition until their caches expire, and keys kept
    /// in the database were written in it; the same format makes both read every key as the
    /// new filter does.
    pub key_format: KeyFormat,
}

impl FilterState {
    /// Whether `meta`'s bits live in the store this state was read from.
    pub fn is_current(&self, meta: &Generation) -> bool {
        meta.incarnation == self.read_from
    }

    /// Every generation the state names, in the order active, building, previous.
    pub fn named(&self) -> impl Iterator<Item = Generation> + '_ {
        [self.active, self.building, self.previous].into_iter().flatten()
    }

    /// The generations an add must reach: every one the state names whose bits are in this
    /// store. Empty means no write can be acknowledged now.
    pub fn write_targets(&self) -> impl Iterator<Item = Generation> + '_ {
        self.named().filter(|m| self.is_current(m))
    }

    /// The generation lookups may read, if its bits are in this store.
    pub fn readable(&self) -> Option<Generation> {
        self.active.filter(|m| self.is_current(m))
    }

    /// The generation lookups may read, or why there is none: the filter was dropped, the
    /// active generation's bits are of another incarnation, or no generation is active.
    pub fn readable_or_why(&self) -> StoreResult<Generation> {
        match self.readable() {
            Some(meta) => Ok(meta),
            None if self.dropped.is_some() => Err(FilterUnavailable::Dropped),
            None if self.active_is_stale() => Err(FilterUnavailable::Incarnation),
            None => Err(FilterUnavailable::MetaMissing),
        }
    }

    /// Generations of another incarnation: their bits may have lost acknowledged adds.
    pub fn stale(&self) -> impl Iterator<Item = Generation> + '_ {
        self.named().filter(|m| !self.is_current(m))
    }

    /// The current-incarnation generation with this number, if the state names it.
    pub fn generation(&self, generation: u64) -> Option<Generation> {
        self.write_targets().find(|m| m.generation == generation)
    }

    /// Whether the active generation exists but its store has changed since it was built.
    pub fn active_is_stale(&self) -> bool {
        self.active.is_some_and(|m| !self.is_current(&m))
    }

    /// The tombstone that replaces this state when the filter is dropped at `now_ms`: no
    /// generation named, the newest number ever used (by this state's generations, an earlier
    /// drop, this lineage, or the clock) kept as the floor for a filter created again.
    pub fn tombstone(&self, key_format: KeyFormat, now_ms: u64) -> FilterState {
        let last_generation = self.named().map(|m| m.generation).chain([self.lineage, now_ms]).max().unwrap_or(now_ms);
        FilterState {
            lineage: self.lineage,
            dropped: Some(Dropped { last_generation, key_format }),
            ..FilterState::default()
        }
    }

    /// The lineage (and first generation number) of a filter created at `now_ms` in place of
    /// this state: after every number a dropped filter under the name used, else the clock.
    pub fn next_lineage(&self, now_ms: u64) -> u64 {
        let floor = self.dropped.map_or(0, |d| d.last_generation + 1);
        let newest = self.named().map(|m| m.generation + 1).max().unwrap_or(0);
        now_ms.max(floor).max(newest).max(self.lineage + 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(generation: u64, incarnation: u64) -> Option<Generation> {
        Some(Generation {
            generation,
            params: Params::new(1, 6, 0, 2).unwrap(),
            incarnation,
            journal: true,
            lease: None,
        })
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
    fn a_tombstone_names_nothing_and_keeps_the_floor_for_the_next_life() {
        let state = FilterState {
            active: meta(3_000, 7),
            building: meta(9_000, 7),
            lineage: 2_000,
            read_from: 7,
            revision: 5,
            ..FilterState::default()
        };
        let tomb = state.tombstone(KeyFormat::Bytes, 4_000);
        assert_eq!(tomb.named().count(), 0, "a dropped filter names no generation to read or write");
        assert_eq!(tomb.readable(), None);
        assert_eq!(tomb.dropped, Some(Dropped { last_generation: 9_000, key_format: KeyFormat::Bytes }));
        assert_eq!(tomb.lineage, 2_000);
        // A clock behind the dropped filter's generations does not make a number repeat.
        assert_eq!(tomb.next_lineage(5_000), 9_001);
        assert_eq!(tomb.next_lineage(20_000), 20_000);
        assert_eq!(state.tombstone(KeyFormat::Bytes, 12_000).dropped.unwrap().last_generation, 12_000);
        // Nothing known (a lost state): the clock, and after any lineage seen.
        assert_eq!(FilterState::default().next_lineage(1_000), 1_000);
        assert_eq!(FilterState { lineage: 1_000, ..FilterState::default() }.next_lineage(500), 1_001);
    }

    #[test]
    fn tombstones_and_lineages_are_stored_and_old_states_read_as_live() {
        let tomb = FilterState::default().tombstone(KeyFormat::SHA256_HEX, 42);
        let json = serde_json::to_string(&tomb).unwrap();
        assert!(json.contains(r#""dropped":{"last_generation":42,"key_format":"hex:64"}"#), "{json}");
        assert_eq!(serde_json::from_str::<FilterState>(&json).unwrap(), tomb);
        let live = FilterState { active: meta(5, 1), lineage: 5, ..FilterState::default() };
        let json = serde_json::to_string(&live).unwrap();
        assert!(!json.contains("dropped"), "{json}");
        let old: FilterState = serde_json::from_str(r#"{"active":null,"building":null,"previous":null}"#).unwrap();
        assert_eq!((old.lineage, old.dropped), (0, None));
    }

    #[test]
    fn records_written_before_leases_read_as_barrier_generations() {
        let json = r#"{"active":{"generation":5,"params":{"seed":1,"k":6,"segment_blocks_log2":0,"segment_count":2},"incarnation":7,"journal":true},"building":null,"previous":null}"#;
        let state: FilterState = serde_json::from_str(json).unwrap();
        assert_eq!(state.active.unwrap().lease, None, "no terms: the barrier, and writers do not wait");
        assert_eq!(state.read_consistency, None);
        let terms = LeaseTerms::new(std::time::Duration::from_millis(10), 1_000);
        let leased = FilterState {
            active: meta(3, 7).map(|m| Generation { lease: Some(terms), ..m }),
            read_consistency: Some(ReadConsistency::Lease),
            ..FilterState::default()
        };
        let json = serde_json::to_string(&leased).unwrap();
        assert!(json.contains(r#""lease":{"lease_us":10000,"drift_ppm":1000}"#), "{json}");
        assert!(json.contains(r#""read_consistency":"lease""#), "{json}");
        assert_eq!(serde_json::from_str::<FilterState>(&json).unwrap(), leased);
        let barrier = serde_json::to_string(&meta(3, 7).unwrap()).unwrap();
        assert!(!barrier.contains("lease"), "a generation without terms is written as before: {barrier}");
    }

    #[test]
    fn a_state_of_a_newer_format_or_with_unknown_fields_is_refused_not_guessed_at() {
        let ours = FilterState { active: meta(3, 7), format: STATE_FORMAT, ..FilterState::default() };
        let json = serde_json::to_string(&ours).unwrap();
        assert!(json.contains(r#""format":1"#), "{json}");
        assert_eq!(decode_state(&json).unwrap(), ours);
        let older = r#"{"active":null,"building":null,"previous":null,"revision":3}"#;
        assert_eq!(decode_state(older).unwrap().format, 1, "states from before formats were numbered are format 1");
        let newer = json.replace(r#""format":1"#, r#""format":2,"checkpoint":{"position":9}"#);
        match decode_state(&newer) {
            Err(FilterUnavailable::UnknownFormat { found: 2, known: STATE_FORMAT, .. }) => {}
            other => panic!("a newer format must be refused: {other:?}"),
        }
        let unknown_field = json.replace(r#""format":1"#, r#""format":1,"checkpoint":{"position":9}"#);
        let err = decode_state(&unknown_field).unwrap_err().to_string();
        assert!(err.contains("checkpoint"), "a field this build does not know is refused, not dropped: {err}");
        let in_a_generation = json.replace(r#""journal":true"#, r#""journal":true,"sealed":5"#);
        assert!(decode_state(&in_a_generation).is_err(), "unknown fields of a generation are refused too");
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
