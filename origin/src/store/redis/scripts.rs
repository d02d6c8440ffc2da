//! The Lua scripts the store runs in Redis: one file each in `scripts/`, each opening with its
//! KEYS/ARGV contract. A script is one atomic step in Redis: what must never be seen half done
//! (an add's bits without its journal entry, a state replaced over someone else's change) is
//! done in one.
//!
//! Every script is sent behind the incarnation guard (`scripts/guard.lua`, see `cluster` and
//! `link`), whose arguments follow the script's own (`RedisFilterStore::run` adds them).

use super::cluster::GUARD_PRELUDE;
use redis::Script;

/// Every script the store runs, as sent in this mode.
#[derive(Clone)]
pub(super) struct Scripts {
    /// `add.lua`: an add's bits in each touched segment, then its journal entry.
    pub add: Script,
    /// `read_segment.lua`: a segment's version and bits, together.
    pub read_segment: Script,
    /// `read_block.lua`: one block of a segment's bits (a lookup on a cluster).
    pub read_block: Script,
    /// `read_version.lua`: a segment's version (on a cluster).
    pub read_version: Script,
    /// `segment_size.lua`: a segment's size and version (on a cluster).
    pub segment_size: Script,
    /// `create_segment.lua`: a zeroed segment, unless it exists.
    pub create_segment: Script,
    /// `merge_segment.lua`: a rebuild's built bits ORed into a segment.
    pub merge_segment: Script,
    /// `retire_segment.lua`: a segment made unreadable, adds to it no-ops.
    pub retire_segment: Script,
    /// `init_journal.lua`: a generation's journal, started with one entry.
    pub init_journal: Script,
    /// `read_journal.lua`: the journal after a position.
    pub read_journal: Script,
    /// `journal_head.lua`: the journal's head and length.
    pub journal_head: Script,
    /// `retire_journal.lua`: a retired generation's journal replaced by a marker.
    pub retire_journal: Script,
    /// `replace_state.lua`: the filter state's compare-and-set.
    pub replace_state: Script,
    /// `delete_unless_retired.lua`: a key deleted unless it is a retirement marker.
    pub delete_unless_retired: Script,
    /// `lease.lua`: the rebuild lease taken or extended.
    pub lease: Script,
    /// `release_lease.lua`: the rebuild lease released by its owner.
    pub release_lease: Script,
    /// `finish_run.lua`: a rebuild's run marked done on its board, the claim released.
    pub finish_run: Script,
    /// `read_sealed_chunk.lua`: a chunk of the journal by time, sealed first when it is due.
    pub read_sealed_chunk: Script,
}

impl Scripts {
    /// The scripts, each behind the guard.
    pub fn new() -> Scripts {
        let script = |body: &str| Script::new(&format!("{GUARD_PRELUDE}{body}"));
        Scripts {
            add: script(include_str!("scripts/add.lua")),
            read_segment: script(include_str!("scripts/read_segment.lua")),
            read_block: script(include_str!("scripts/read_block.lua")),
            read_version: script(include_str!("scripts/read_version.lua")),
            segment_size: script(include_str!("scripts/segment_size.lua")),
            create_segment: script(include_str!("scripts/create_segment.lua")),
            merge_segment: script(include_str!("scripts/merge_segment.lua")),
            retire_segment: script(include_str!("scripts/retire_segment.lua")),
            init_journal: script(include_str!("scripts/init_journal.lua")),
            read_journal: script(include_str!("scripts/read_journal.lua")),
            journal_head: script(include_str!("scripts/journal_head.lua")),
            retire_journal: script(include_str!("scripts/retire_journal.lua")),
            replace_state: script(include_str!("scripts/replace_state.lua")),
            delete_unless_retired: script(include_str!("scripts/delete_unless_retired.lua")),
            lease: script(include_str!("scripts/lease.lua")),
            release_lease: script(include_str!("scripts/release_lease.lua")),
            finish_run: script(include_str!("scripts/finish_run.lua")),
            read_sealed_chunk: script(include_str!("scripts/read_sealed_chunk.lua")),
        }
    }
}
