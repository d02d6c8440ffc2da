//! The columns bloomgate needs, and the check of a keyspace that records no schema version
//! (made by hand before versions were recorded) against them. Pure: the store reads
//! `system_schema` and hands the rows here. The statements that make the schema are the
//! migrations (`migrations`).

/// What part of the primary key a column is, as `system_schema.columns.kind` names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ColumnKind {
    /// Part of the partition key: lookups bind it, and the rebuild's scan takes its token.
    PartitionKey,
    /// Anything else: a clustering, regular or static column serves bloomgate the same.
    Other,
}

/// One column bloomgate reads or writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequiredColumn {
    /// Table in the keyspace.
    pub table: &'static str,
    /// Column name.
    pub column: &'static str,
    /// CQL type, as `system_schema.columns.type` spells it.
    pub cql_type: &'static str,
    /// Whether it must be part of the partition key.
    pub kind: ColumnKind,
}

const fn column(table: &'static str, column: &'static str, cql_type: &'static str, kind: ColumnKind) -> RequiredColumn {
    RequiredColumn { table, column, cql_type, kind }
}

/// Every column the statements in `cassandra` use. `keys` is partitioned by (filter, key)
/// together: one key is one partition, and `token(filter, key)` cuts the rebuild's scan.
pub const REQUIRED_COLUMNS: &[RequiredColumn] = &[
    column("keys", "filter", "text", ColumnKind::PartitionKey),
    column("keys", "key", "blob", ColumnKind::PartitionKey),
    column("keys", "value", "blob", ColumnKind::Other),
    column("filters", "name", "text", ColumnKind::PartitionKey),
    column("filters", "key_format", "text", ColumnKind::Other),
    column("filters", "capacity", "bigint", ColumnKind::Other),
    column("filters", "fp_rate", "double", ColumnKind::Other),
    column("filters", "segment_bytes", "bigint", ColumnKind::Other),
    column("filters", "format", "int", ColumnKind::Other),
    column("dropped_filters", "name", "text", ColumnKind::PartitionKey),
    column("dropped_filters", "format", "int", ColumnKind::Other),
    column("dropped_filters", "key_format", "text", ColumnKind::Other),
    column("dropped_filters", "last_generation", "bigint", ColumnKind::Other),
    column("dropped_filters", "dropped_at", "timestamp", ColumnKind::Other),
    column("cluster_version", "scope", "text", ColumnKind::PartitionKey),
    column("cluster_version", "format", "int", ColumnKind::Other),
    column("cluster_version", "version", "int", ColumnKind::Other),
    column("cluster_version", "raised_at", "timestamp", ColumnKind::Other),
    column("origin_reports", "origin", "text", ColumnKind::PartitionKey),
    column("origin_reports", "format", "int", ColumnKind::Other),
    column("origin_reports", "release", "text", ColumnKind::Other),
    column("origin_reports", "knows", "int", ColumnKind::Other),
    column("origin_reports", "reported_at", "timestamp", ColumnKind::Other),
    column("recent_writes", "filter", "text", ColumnKind::PartitionKey),
    column("recent_writes", "bucket", "bigint", ColumnKind::PartitionKey),
    column("recent_writes", "written_at", "timestamp", ColumnKind::Other),
    column("recent_writes", "key", "blob", ColumnKind::Other),
    column("recent_writes", "format", "int", ColumnKind::Other),
    column("checkpoints", "filter", "text", ColumnKind::PartitionKey),
    column("checkpoints", "format", "int", ColumnKind::Other),
    column("checkpoints", "generation", "bigint", ColumnKind::Other),
    column("checkpoints", "params", "text", ColumnKind::Other),
    column("checkpoints", "taken_at", "timestamp", ColumnKind::Other),
    column("checkpoint_segments", "filter", "text", ColumnKind::PartitionKey),
    column("checkpoint_segments", "generation", "bigint", ColumnKind::PartitionKey),
    column("checkpoint_segments", "segment", "int", ColumnKind::Other),
    column("checkpoint_segments", "format", "int", ColumnKind::Other),
    column("checkpoint_segments", "version", "bigint", ColumnKind::Other),
    column("checkpoint_segments", "incarnation", "bigint", ColumnKind::Other),
    column("checkpoint_segments", "bits", "blob", ColumnKind::Other),
];

/// The name of the index that lets a rebuild read only its own filter's keys.
pub const FILTER_INDEX: &str = "keys_by_filter";

/// A column as `system_schema.columns` describes it: (table, column, type, kind).
pub type ExistingColumn = (String, String, String, String);

/// What is wrong with the existing columns of the keyspace: the keyspace or a table missing
/// as a whole, else one line per required column that is missing or differs; empty when
/// bloomgate can use them. Extra columns and tables are fine.
pub fn schema_problems(existing: &[ExistingColumn]) -> Vec<String> {
    if existing.is_empty() {
        return vec!["it does not exist, or holds no tables".into()];
    }
    let table_exists = |name: &str| existing.iter().any(|(table, ..)| table == name);
    let mut problems: Vec<String> = Vec::new();
    for want in REQUIRED_COLUMNS {
        if !table_exists(want.table) {
            let problem = format!("table {} does not exist", want.table);
            if !problems.contains(&problem) {
                problems.push(problem);
            }
        }
    }
    let column_problems = REQUIRED_COLUMNS.iter().filter(|want| table_exists(want.table)).filter_map(|want| {
        let found = existing.iter().find(|(table, column, _, _)| table == want.table && column == want.column);
        let Some((_, _, cql_type, kind)) = found else {
            return Some(format!("column {}.{} ({}) is missing", want.table, want.column, want.cql_type));
        };
        if cql_type != want.cql_type {
            return Some(format!("column {}.{} is {cql_type}, not {}", want.table, want.column, want.cql_type));
        }
        let in_partition_key = kind == "partition_key";
        match (want.kind, in_partition_key) {
            (ColumnKind::PartitionKey, false) => {
                Some(format!("column {}.{} is {kind}, not part of the partition key", want.table, want.column))
            }
            (ColumnKind::Other, true) => Some(format!(
                "column {}.{} is part of the partition key, which bloomgate does not bind",
                want.table, want.column
            )),
            _ => None,
        }
    });
    problems.extend(column_problems);
    problems
}

/// The start-up error of an origin that manages no schema (`cassandra_manage_schema = false`)
/// on a keyspace that records no version and lacks what bloomgate uses: what is missing, and
/// what to run.
pub fn unversioned_schema_error(keyspace: &str, problems: &[String]) -> String {
    format!(
        "keyspace {keyspace} records no schema version, and is not ready: {}. Run `bloomgate-origin schema apply` with this origin's settings (or `schema print` and apply the script through cqlsh), then start again. An existing table with other columns must be dropped or altered to match first.",
        problems.join("; ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The columns the created tables really have, as Cassandra 5.0 lists them.
    fn as_created() -> Vec<ExistingColumn> {
        let row = |t: &str, c: &str, ty: &str, k: &str| (t.into(), c.into(), ty.into(), k.into());
        vec![
            row("keys", "filter", "text", "partition_key"),
            row("keys", "key", "blob", "partition_key"),
            row("keys", "value", "blob", "regular"),
            row("filters", "name", "text", "partition_key"),
            row("filters", "key_format", "text", "regular"),
            row("filters", "capacity", "bigint", "regular"),
            row("filters", "fp_rate", "double", "regular"),
            row("filters", "segment_bytes", "bigint", "regular"),
            row("filters", "format", "int", "regular"),
            row("dropped_filters", "name", "text", "partition_key"),
            row("dropped_filters", "format", "int", "regular"),
            row("dropped_filters", "key_format", "text", "regular"),
            row("dropped_filters", "last_generation", "bigint", "regular"),
            row("dropped_filters", "dropped_at", "timestamp", "regular"),
            row("cluster_version", "scope", "text", "partition_key"),
            row("cluster_version", "format", "int", "regular"),
            row("cluster_version", "version", "int", "regular"),
            row("cluster_version", "raised_at", "timestamp", "regular"),
            row("origin_reports", "origin", "text", "partition_key"),
            row("origin_reports", "format", "int", "regular"),
            row("origin_reports", "release", "text", "regular"),
            row("origin_reports", "knows", "int", "regular"),
            row("origin_reports", "reported_at", "timestamp", "regular"),
            row("recent_writes", "filter", "text", "partition_key"),
            row("recent_writes", "bucket", "bigint", "partition_key"),
            row("recent_writes", "written_at", "timestamp", "clustering"),
            row("recent_writes", "key", "blob", "clustering"),
            row("recent_writes", "format", "int", "regular"),
            row("checkpoints", "filter", "text", "partition_key"),
            row("checkpoints", "format", "int", "regular"),
            row("checkpoints", "generation", "bigint", "regular"),
            row("checkpoints", "params", "text", "regular"),
            row("checkpoints", "taken_at", "timestamp", "regular"),
            row("checkpoint_segments", "filter", "text", "partition_key"),
            row("checkpoint_segments", "generation", "bigint", "partition_key"),
            row("checkpoint_segments", "segment", "int", "clustering"),
            row("checkpoint_segments", "format", "int", "regular"),
            row("checkpoint_segments", "version", "bigint", "regular"),
            row("checkpoint_segments", "incarnation", "bigint", "regular"),
            row("checkpoint_segments", "bits", "blob", "regular"),
        ]
    }

    #[test]
    fn the_created_schema_has_no_problems_and_extra_columns_are_fine() {
        let mut columns = as_created();
        assert!(schema_problems(&columns).is_empty());
        columns.push(("keys".into(), "written_at".into(), "timestamp".into(), "regular".into()));
        assert!(schema_problems(&columns).is_empty());
    }

    #[test]
    fn a_missing_keyspace_or_table_is_named_as_a_whole() {
        assert_eq!(schema_problems(&[]), ["it does not exist, or holds no tables"]);
        let mut columns = as_created();
        columns.retain(|(table, ..)| table == "keys");
        let gone: Vec<String> = [
            "filters",
            "dropped_filters",
            "cluster_version",
            "origin_reports",
            "recent_writes",
            "checkpoints",
            "checkpoint_segments",
        ]
        .iter()
        .map(|table| format!("table {table} does not exist"))
        .collect();
        assert_eq!(schema_problems(&columns), gone);
        columns.retain(|(_, column, ..)| column != "value");
        let mut also = gone.clone();
        also.push("column keys.value (blob) is missing".into());
        assert_eq!(schema_problems(&columns), also);
    }

    #[test]
    fn a_wrong_type_or_primary_key_is_named() {
        let mut columns = as_created();
        columns[1].2 = "text".into();
        // (filter) as the partition key and key clustering: the scan's token(filter, key) fails.
        columns[1].3 = "clustering".into();
        columns[2].3 = "partition_key".into();
        let problems = schema_problems(&columns);
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems[0].contains("keys.key is text, not blob"), "{problems:?}");
        assert!(problems[1].contains("keys.value is part of the partition key"), "{problems:?}");
        columns[1].2 = "blob".into();
        assert!(schema_problems(&columns)[0].contains("keys.key is clustering, not part of the partition key"));
    }

    #[test]
    fn a_schema_from_before_drop_records_lacks_their_table() {
        let mut columns = as_created();
        columns.retain(|(table, ..)| table != "dropped_filters");
        assert_eq!(schema_problems(&columns), ["table dropped_filters does not exist"]);
    }

    #[test]
    fn a_schema_from_before_the_format_column_lacks_it() {
        let mut columns = as_created();
        columns.retain(|(table, column, ..)| !(table == "filters" && column == "format"));
        assert_eq!(schema_problems(&columns), ["column filters.format (int) is missing"]);
    }

    #[test]
    fn the_error_names_what_is_missing_and_the_command_to_run() {
        let message = unversioned_schema_error("bg", &schema_problems(&[]));
        assert!(message.contains("keyspace bg records no schema version"), "{message}");
        assert!(message.contains("it does not exist, or holds no tables"), "{message}");
        assert!(message.contains("Run `bloomgate-origin schema apply`"), "{message}");
        assert!(message.contains("`schema print`"), "{message}");
    }
}
