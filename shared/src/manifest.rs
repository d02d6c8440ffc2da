//! The manifest: a small document describing one generation of a filter, which an edge reads to
//! know the params, the key format, and the current version of every segment.
//!
//! A generation with an insert journal is described by its journal's head alone: every segment
//! names the journal position it was read at, so a copy is usable when current to the head
//! (brought forward by the journal's entries), and listing every segment's version would only
//! cost bytes on every refresh. A generation without one lists every segment's version.
//!
//! Segment URLs carry the generation and the version (or the journal position the copy must at
//! least be current to), so each URL names bytes that are always good for it: caches may keep
//! them forever, and freshness is decided by the (short-lived) manifest alone.

use crate::key::KeyFormat;
use crate::params::Params;
use crate::segment::SegmentHeader;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

/// Longest filter name: short, URL- and Redis-key-safe.
pub const MAX_FILTER_NAME: usize = 64;

/// The manifest's format: the one origins of this build serve, and the newest its edges read.
/// Raised with every change to what a manifest means; an edge that meets a newer one refuses it
/// (and forwards its lookups), never guesses at it.
pub const MANIFEST_FORMAT: u32 = 1;

/// The format of manifests served before formats were numbered: the first.
fn first_format() -> u32 {
    1
}

/// One filter generation, as published to edges.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Manifest {
    /// The manifest's format ([`MANIFEST_FORMAT`] from this build; 1 when absent).
    #[serde(default = "first_format")]
    pub format: u32,
    /// Filter name.
    pub filter: String,
    /// How the filter's keys are written.
    pub key_format: KeyFormat,
    /// Generation whose bits these are.
    pub generation: u64,
    /// Parameters of that generation.
    pub params: Params,
    /// Current version of each segment, indexed by segment; empty when the manifest names a
    /// journal head (copies are then judged by their journal position).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub segment_versions: Vec<u64>,
    /// The generation's insert journal head, read after the request arrived: a segment copy
    /// current to this position answers "no" for every key acknowledged before the request
    /// (see [`journal`](crate::journal)). None when the origin keeps no journal: then a copy
    /// must be at least at the listed version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub journal: Option<crate::journal::JournalPosition>,
}

/// Why a manifest is unusable.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ManifestError {
    /// The number of segment versions is not the params' segment count (nor zero, with a
    /// journal head).
    SegmentCountMismatch {
        /// Count in the params.
        params: u32,
        /// Versions listed.
        listed: usize,
    },
    /// The filter name is not acceptable.
    BadFilterName(FilterNameError),
    /// A format newer than this build reads (a newer origin served it).
    UnknownFormat(u32),
}

impl fmt::Display for ManifestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ManifestError::SegmentCountMismatch { params, listed } => {
                write!(f, "manifest lists {listed} segment versions for {params} segments")
            }
            ManifestError::BadFilterName(e) => write!(f, "manifest {e}"),
            ManifestError::UnknownFormat(found) => {
                write!(f, "manifest format {found} is newer than this build reads ({MANIFEST_FORMAT})")
            }
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for ManifestError {}

impl Manifest {
    /// Checks the manifest is internally consistent.
    pub fn validate(&self) -> Result<(), ManifestError> {
        if self.format > MANIFEST_FORMAT {
            return Err(ManifestError::UnknownFormat(self.format));
        }
        validate_filter_name(&self.filter).map_err(ManifestError::BadFilterName)?;
        let listed = self.segment_versions.len();
        let by_journal = self.journal.is_some() && listed == 0;
        if !by_journal && listed != self.params.segment_count as usize {
            return Err(ManifestError::SegmentCountMismatch {
                params: self.params.segment_count,
                listed: self.segment_versions.len(),
            });
        }
        Ok(())
    }

    /// The listed version of segment `index`, if it exists.
    pub fn segment_version(&self, index: u32) -> Option<u64> {
        self.segment_versions.get(index as usize).copied()
    }

    /// True when a decoded segment belongs to this manifest's filter generation and is at
    /// least as new as the version listed (a reader must never answer from older bits).
    pub fn accepts(&self, header: &SegmentHeader) -> bool {
        header.params == self.params
            && header.generation == self.generation
            && self.segment_version(header.index).is_some_and(|listed| header.version >= listed)
    }
}

/// Why a filter name was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FilterNameError {
    /// Empty or longer than [`MAX_FILTER_NAME`].
    BadLength(usize),
    /// A character outside `[a-z0-9_-]`.
    BadCharacter(char),
}

impl fmt::Display for FilterNameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FilterNameError::BadLength(n) => {
                write!(f, "filter name must be 1 to {MAX_FILTER_NAME} characters, got {n}")
            }
            FilterNameError::BadCharacter(c) => {
                write!(f, "filter name may use only lowercase letters, digits, '-' and '_', found {c:?}")
            }
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for FilterNameError {}

/// Filter names appear in URLs, Redis keys and Cassandra rows: keep them to `[a-z0-9_-]{1,64}`.
pub fn validate_filter_name(name: &str) -> Result<(), FilterNameError> {
    if name.is_empty() || name.len() > MAX_FILTER_NAME {
        return Err(FilterNameError::BadLength(name.len()));
    }
    match name.chars().find(|c| !matches!(c, 'a'..='z' | '0'..='9' | '-' | '_')) {
        Some(c) => Err(FilterNameError::BadCharacter(c)),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    fn manifest() -> Manifest {
        let params = Params::new(1, 6, 4, 3).unwrap();
        Manifest {
            format: MANIFEST_FORMAT,
            filter: "hashes".into(),
            key_format: KeyFormat::SHA256_HEX,
            generation: 2,
            params,
            segment_versions: vec![5, 0, 9],
            journal: None,
        }
    }

    #[test]
    fn json_round_trip_and_validation() {
        let m = manifest();
        let json = serde_json::to_string(&m).unwrap();
        assert!(json.contains("\"key_format\":\"hex:64\""), "{json}");
        let back: Manifest = serde_json::from_str(&json).unwrap();
        assert_eq!(back, m);
        assert_eq!(back.validate(), Ok(()));
        let short = Manifest { segment_versions: vec![1], ..m.clone() };
        assert!(short.validate().is_err());
        assert!(!json.contains("journal"), "no journal, no field: older edges read it as before");
        let head = crate::journal::JournalPosition { added: 7, id_ms: 1_700_000_000_000, id_seq: 3 };
        let with = Manifest { journal: Some(head), ..m };
        let back: Manifest = serde_json::from_str(&serde_json::to_string(&with).unwrap()).unwrap();
        assert_eq!(back.journal, Some(head));
        // With a journal head, the versions may be left out: the copies name their positions.
        let slim = Manifest { segment_versions: vec![], ..with };
        let json = serde_json::to_string(&slim).unwrap();
        assert!(!json.contains("segment_versions"), "{json}");
        let back: Manifest = serde_json::from_str(&json).unwrap();
        assert_eq!((back.validate(), back.segment_versions.len()), (Ok(()), 0));
        let unlisted = Manifest { journal: None, ..back };
        assert!(unlisted.validate().is_err(), "without a journal, every version must be listed");
    }

    #[test]
    fn a_manifest_of_a_newer_format_is_refused_and_one_without_a_number_is_the_first() {
        let m = manifest();
        let json = serde_json::to_string(&m).unwrap();
        assert!(json.contains("\"format\":1"), "{json}");
        let unnumbered: Manifest = serde_json::from_str(&json.replace("\"format\":1,", "")).unwrap();
        assert_eq!(unnumbered.format, 1);
        let newer = Manifest { format: MANIFEST_FORMAT + 1, ..m };
        assert_eq!(newer.validate(), Err(ManifestError::UnknownFormat(MANIFEST_FORMAT + 1)));
    }

    #[test]
    fn accepts_only_same_generation_and_not_older() {
        let m = manifest();
        let header =
            SegmentHeader { params: m.params, generation: 2, index: 2, version: 9, checksum: 0, journal: None };
        assert!(m.accepts(&header));
        assert!(m.accepts(&SegmentHeader { version: 10, ..header }));
        assert!(!m.accepts(&SegmentHeader { version: 8, ..header }));
        assert!(!m.accepts(&SegmentHeader { generation: 1, ..header }));
        assert!(!m.accepts(&SegmentHeader { index: 3, ..header }));
        let other = Params { seed: 2, ..m.params };
        assert!(!m.accepts(&SegmentHeader { params: other, ..header }));
    }

    #[test]
    fn filter_names() {
        assert!(validate_filter_name("file-hashes_2").is_ok());
        assert_eq!(validate_filter_name(""), Err(FilterNameError::BadLength(0)));
        assert_eq!(validate_filter_name("A"), Err(FilterNameError::BadCharacter('A')));
        assert_eq!(validate_filter_name("a/b"), Err(FilterNameError::BadCharacter('/')));
        assert!(validate_filter_name(&"a".repeat(65)).is_err());
    }
}
