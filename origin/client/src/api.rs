//! The API's bodies: what a request sends and what each answer holds. The origin serializes
//! these very types and the edge writes its own answers with them, so a client, the origin and
//! the edge cannot disagree on a field's name.

mod answers;
mod batch_keys;
mod filters;
mod isolate;
mod problem;
mod stats;

pub use answers::{AnsweredBy, KeyAnswer, KeyDeleted, KeyStored, Keys, KeysStored, Lookups, StoredValue};
pub use batch_keys::{parse_batch_keys, BatchKeysError};
pub use filters::{
    CreateFilter, DropKeys, DropQuery, FilterDropped, FilterList, FilterSummary, ReadConsistency, Rebuild,
    RebuildStarted,
};
pub use isolate::{CpuFigure, CpuSpent, FleetPoints, HeldBytes, IsolateCounts, IsolateReport};
pub use problem::{reason_phrase, Problem, ABOUT_BLANK};
pub use stats::{FilterStats, RebuildProgress};
