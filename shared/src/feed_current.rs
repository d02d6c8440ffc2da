//! The shared feed's "current" document (docs/design.md, "The edge at many isolates"): what
//! an isolate needs at a cold start or after a generation switch — the readable generation, its
//! parameters and key format, the chunk width, and an *epoch*: a chunk sealed when the document
//! was read, from which the isolate loads segments and then follows the chunks after it.
//!
//! Its URL names a *slot* of [`CURRENT_SLOT_MS`], and shared caches keep it for one slot at
//! most, so no cache serves it long past its purpose. A stale one is never wrong, only slower:
//! freshness is counted from chunks, never from this document, and a chunk says when its
//! generation was superseded.

use crate::key::KeyFormat;
use crate::params::Params;
use alloc::format;
use alloc::string::String;

/// The format this build writes, and the newest it reads.
pub const FEED_CURRENT_FORMAT: u32 = 1;

/// The length of the slot a current document's URL names, and the longest a cache keeps it.
pub const CURRENT_SLOT_MS: u64 = 10_000;

/// The document.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct FeedCurrent {
    /// Its format.
    pub format: u32,
    /// The filter.
    pub filter: String,
    /// How the filter's keys are written.
    pub key_format: KeyFormat,
    /// The readable generation.
    pub generation: u64,
    /// Its parameters.
    pub params: Params,
    /// The chunk width its feed is read in, ms.
    pub width_ms: u64,
    /// A chunk sealed when the document was read: segments at this epoch hold every write up
    /// to its end.
    pub epoch: u64,
    /// Redis's clock when the document was read, ms since the Unix epoch.
    pub read_at_ms: u64,
}

impl FeedCurrent {
    /// Refuses a document of a newer format than this build reads, saying so.
    pub fn check_format(&self) -> Result<(), String> {
        match self.format {
            1..=FEED_CURRENT_FORMAT => Ok(()),
            other => Err(format!(
                "current document format {other} is not one this build reads (up to {FEED_CURRENT_FORMAT})"
            )),
        }
    }
}

/// The slot of a moment, ms since the Unix epoch.
pub fn slot_of(now_ms: u64) -> u64 {
    now_ms / CURRENT_SLOT_MS
}

/// Where an asked slot stands against the origin's clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlotStanding {
    /// The slot now, or one next to it (clocks differ a little): answered.
    Current,
    /// A slot still to come: a cache would keep it past its purpose. Refused.
    Early,
    /// A slot past: ask for the current one.
    Late,
}

/// Whether slot `asked` may be answered at `now_ms`.
pub fn slot_standing(asked: u64, now_ms: u64) -> SlotStanding {
    let now = slot_of(now_ms);
    if asked > now.saturating_add(1) {
        SlotStanding::Early
    } else if asked.saturating_add(1) < now {
        SlotStanding::Late
    } else {
        SlotStanding::Current
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_next_to_now_is_answered_and_others_are_not() {
        let now = 1_765_000_005_000;
        let slot = slot_of(now);
        assert_eq!(slot_standing(slot, now), SlotStanding::Current);
        assert_eq!(slot_standing(slot + 1, now), SlotStanding::Current, "an isolate's clock a little ahead");
        assert_eq!(slot_standing(slot - 1, now), SlotStanding::Current, "a little behind");
        assert_eq!(slot_standing(slot + 2, now), SlotStanding::Early);
        assert_eq!(slot_standing(slot - 2, now), SlotStanding::Late);
        assert_eq!(slot_standing(0, 0), SlotStanding::Current);
    }

    #[test]
    fn a_newer_format_is_refused() {
        let doc = FeedCurrent {
            format: FEED_CURRENT_FORMAT,
            filter: "f".into(),
            key_format: KeyFormat::Bytes,
            generation: 1,
            params: Params::for_capacity(1_000, 0.01).unwrap(),
            width_ms: 250,
            epoch: 7,
            read_at_ms: 2_000,
        };
        assert!(doc.check_format().is_ok());
        let newer = FeedCurrent { format: FEED_CURRENT_FORMAT + 1, ..doc };
        assert!(newer.check_format().unwrap_err().contains("format 2"));
    }
}
