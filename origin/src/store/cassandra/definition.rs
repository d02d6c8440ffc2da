//! A filter's definition as the `filters` table holds it, and the format it is written in.
//! Every definition this build writes carries [`DEF_FORMAT`]; one written before the column
//! existed (schema version 1, or an older origin mid-upgrade) has none and reads as format 1;
//! one in a format newer than this build reads is refused, naming the filter, never guessed at
//! (its lookups and writes answer 503 until this origin is upgraded). Pure.

use crate::store::{DatabaseError, FilterDef};
use bloomgate_filter::KeyFormat;

/// The format of the definitions this build writes, and the newest it reads.
pub const DEF_FORMAT: i32 = 1;

/// The columns of a definition, in the order of [`DefinitionRow`].
pub(super) const COLUMNS: &str = "name, key_format, capacity, fp_rate, segment_bytes, format";

/// A definition's row: name, key format, capacity, false-positive rate, segment bytes, format.
pub(super) type DefinitionRow = (String, String, i64, f64, i64, Option<i32>);

/// The values a definition is inserted with, in the order of [`COLUMNS`].
pub(super) fn row_of(def: &FilterDef) -> Result<DefinitionRow, DatabaseError> {
    Ok((
        def.name.clone(),
        def.key_format.to_string(),
        i64::try_from(def.capacity).map_err(DatabaseError::other)?,
        def.fp_rate,
        i64::try_from(def.segment_bytes).map_err(DatabaseError::other)?,
        Some(DEF_FORMAT),
    ))
}

/// The definition a row holds; refused when its format is not one this build reads. The format
/// is checked first: a newer format may give the other columns other meanings.
pub(super) fn def_from_row(row: DefinitionRow) -> Result<FilterDef, DatabaseError> {
    let (name, key_format, capacity, fp_rate, segment_bytes, format) = row;
    let format = format.unwrap_or(1);
    if !(1..=DEF_FORMAT).contains(&format) {
        return Err(DatabaseError::UnknownFormat {
            filter: name,
            record: "definition",
            found: format,
            known: DEF_FORMAT,
        });
    }
    Ok(FilterDef {
        key_format: key_format.parse::<KeyFormat>().map_err(DatabaseError::other)?,
        capacity: u64::try_from(capacity).map_err(DatabaseError::other)?,
        fp_rate,
        segment_bytes: u64::try_from(segment_bytes).map_err(DatabaseError::other)?,
        name,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(format: Option<i32>) -> DefinitionRow {
        ("files".into(), "hex:64".into(), 1_000_000, 0.01, 65_536, format)
    }

    #[test]
    fn a_written_definition_reads_back_the_same() {
        let def = def_from_row(row(Some(1))).unwrap();
        assert_eq!(def.name, "files");
        assert_eq!((def.capacity, def.fp_rate, def.segment_bytes), (1_000_000, 0.01, 65_536));
        let written = row_of(&def).unwrap();
        assert_eq!(written.5, Some(DEF_FORMAT), "every definition written carries its format");
        assert_eq!(def_from_row(written).unwrap(), def);
    }

    #[test]
    fn a_definition_without_a_format_is_format_1() {
        assert_eq!(def_from_row(row(None)).unwrap(), def_from_row(row(Some(1))).unwrap());
    }

    #[test]
    fn a_newer_format_is_refused_naming_the_filter_and_what_to_do() {
        let err = def_from_row(row(Some(2))).unwrap_err();
        assert!(
            matches!(&err, DatabaseError::UnknownFormat { filter, record: "definition", found: 2, known: 1 } if filter == "files")
        );
        let message = err.to_string();
        assert!(message.contains("\"files\"") && message.contains("format 2"), "{message}");
        assert!(message.contains("formats up to 1") && message.contains("upgrade this origin"), "{message}");
        // Refused before the rest is read: a newer format may write a key format this build
        // has never heard of.
        let mut unknown = row(Some(3));
        unknown.1 = "base85:20".into();
        assert!(matches!(def_from_row(unknown), Err(DatabaseError::UnknownFormat { found: 3, .. })));
        assert!(matches!(def_from_row(row(Some(0))), Err(DatabaseError::UnknownFormat { found: 0, .. })));
    }
}
