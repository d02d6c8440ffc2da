//! What a drop leaves in the database for good: the dropped filter's key format and the newest
//! generation number it used ([`Dropped`], the same facts its tombstone holds in the filter
//! store). The tombstone alone does not survive the filter store losing its data (a flush, a
//! restart without persistence); this record does, so a filter created again under the name
//! after such a loss still keeps the old key format and numbers its generations after the old
//! ones (see `gate::filters`).
//!
//! One record per name, overwritten by each drop: two drops of one lineage write the same facts
//! (the tombstone is one compare-and-set, and a drop finished again reuses it), and a later
//! lineage's generations are numbered after the record's, so the last write is the newest.
//!
//! Versioned from its first day: every record this build writes carries [`DROP_RECORD_FORMAT`],
//! and one in a newer format is refused (naming the filter), never guessed at. Pure: the
//! Cassandra table and the redb file store what this module encodes.

use super::{DatabaseError, Dropped};
use bloomgate_filter::KeyFormat;
use serde::{Deserialize, Serialize};

/// The format of the drop records this build writes, and the newest it reads.
pub const DROP_RECORD_FORMAT: i32 = 1;

/// What [`DatabaseError::UnknownFormat`] calls this record.
pub const RECORD: &str = "drop record";

/// A drop record as stored: the format, then the facts.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoredDrop {
    /// The format it was written in.
    pub format: i32,
    /// The dropped filter's key format, as written (`KeyFormat`'s text).
    pub key_format: String,
    /// At least every generation number the dropped filter used.
    pub last_generation: i64,
}

impl StoredDrop {
    /// The record of `dropped`, in this build's format.
    pub fn of(dropped: Dropped) -> Result<StoredDrop, DatabaseError> {
        Ok(StoredDrop {
            format: DROP_RECORD_FORMAT,
            key_format: dropped.key_format.to_string(),
            last_generation: i64::try_from(dropped.last_generation).map_err(DatabaseError::other)?,
        })
    }

    /// The facts a record of `filter` holds; refused when its format is not one this build
    /// reads (checked first: a newer format may give the other fields other meanings).
    pub fn read(self, filter: &str) -> Result<Dropped, DatabaseError> {
        if !(1..=DROP_RECORD_FORMAT).contains(&self.format) {
            return Err(DatabaseError::UnknownFormat {
                filter: filter.to_owned(),
                record: RECORD,
                found: self.format,
                known: DROP_RECORD_FORMAT,
            });
        }
        Ok(Dropped {
            key_format: self.key_format.parse::<KeyFormat>().map_err(DatabaseError::other)?,
            last_generation: u64::try_from(self.last_generation).map_err(DatabaseError::other)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dropped(last_generation: u64) -> Dropped {
        Dropped { last_generation, key_format: KeyFormat::SHA256_HEX }
    }

    #[test]
    fn a_record_reads_back_the_facts_it_was_written_with_and_carries_its_format() {
        let record = StoredDrop::of(dropped(1_765_000_000_123)).unwrap();
        assert_eq!(record.format, DROP_RECORD_FORMAT);
        assert_eq!(record.key_format, "hex:64");
        assert_eq!(record.read("files").unwrap(), dropped(1_765_000_000_123));
        let json = serde_json::to_string(&StoredDrop::of(dropped(7)).unwrap()).unwrap();
        assert_eq!(json, r#"{"format":1,"key_format":"hex:64","last_generation":7}"#);
    }

    #[test]
    fn a_newer_format_is_refused_naming_the_filter_the_record_and_what_to_do() {
        let newer = StoredDrop { format: 2, key_format: "base85:20".into(), last_generation: 7 };
        let err = newer.read("files").unwrap_err();
        assert!(matches!(&err, DatabaseError::UnknownFormat { record: RECORD, found: 2, known: 1, .. }));
        let message = err.to_string();
        assert!(message.contains("filter \"files\": its drop record is in format 2"), "{message}");
        assert!(message.contains("upgrade this origin"), "{message}");
        let zero = StoredDrop { format: 0, ..StoredDrop::of(dropped(7)).unwrap() };
        assert!(matches!(zero.read("files"), Err(DatabaseError::UnknownFormat { found: 0, .. })));
        let unknown_field = r#"{"format":1,"key_format":"hex:64","last_generation":7,"why":"x"}"#;
        assert!(serde_json::from_str::<StoredDrop>(unknown_field).is_err(), "no field is silently dropped");
    }
}
