//! The schema's versions: the ordered migrations that build a keyspace, the version this build
//! needs ([`SCHEMA_VERSION`]), which migrations a keyspace still lacks, whether its recorded
//! version lets this origin run, and the whole CQL script for operators who apply schema
//! through cqlsh. Pure: `migrate` runs the statements and reads what a keyspace recorded.
//!
//! A keyspace records each migration applied to it in `schema_migrations` (version,
//! description, the oldest reader, when). Every statement is a no-op where its object exists, so
//! applying is idempotent: a migration interrupted halfway is simply applied again.
//!
//! A migration that only adds what older builds never touch (a table, a column they do not
//! read) records an *oldest reader* below its own version: builds that know that version still
//! run on the keyspace. So a rollback, or a pod of the previous release restarting mid-upgrade,
//! runs on a schema one release ahead of it, as long as every migration it does not know says
//! so.

use super::schema::FILTER_INDEX;

/// One step of the schema, applied once to a keyspace and recorded there.
#[derive(Clone, Copy, Debug)]
pub struct Migration {
    /// Its number: migrations are applied in this order.
    pub version: u32,
    /// What it does, recorded beside its version.
    pub description: &'static str,
    /// The oldest schema version a build may know and still run on a keyspace this migration
    /// was applied to: its own version when older builds would misread what it makes, lower
    /// when it only adds what they never touch. Recorded beside it, so that builds that never
    /// heard of it can tell.
    pub oldest_reader: u32,
    statements: fn(&str) -> Vec<String>,
}

impl Migration {
    /// Its statements for `keyspace`, in order; each is a no-op where its object exists.
    pub fn statements(&self, keyspace: &str) -> Vec<String> {
        (self.statements)(keyspace)
    }
}

/// Every migration this build knows, oldest first.
pub const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        description: "tables keys and filters, and the index keys_by_filter",
        oldest_reader: 1,
        statements: |ks| vec![keys_table(ks), filters_table(ks), filter_index(ks)],
    },
    Migration {
        version: 2,
        description: "filters.format: the format a filter's definition is written in",
        oldest_reader: 2,
        // IF NOT EXISTS (Cassandra 4.1 and later): a column already there is no error, here
        // and in a script run twice through cqlsh.
        statements: |ks| vec![format!("ALTER TABLE {ks}.filters ADD IF NOT EXISTS format int")],
    },
    Migration {
        version: 3,
        description: "table dropped_filters: what a drop leaves for a filter created again under the name",
        // Builds of version 2 never read it: they run on it, and keep no drop records.
        oldest_reader: 2,
        statements: |ks| vec![dropped_filters_table(ks)],
    },
    Migration {
        version: 4,
        description: "tables cluster_version, origin_reports and recent_writes: the version origins agree to, who runs, and the log of recent writes",
        // Builds of versions 2 and 3 never read them: they run on it (and, not knowing the
        // cluster version, are what `upgrade finish` waits for to be gone).
        oldest_reader: 2,
        statements: |ks| vec![cluster_version_table(ks), origin_reports_table(ks), recent_writes_table(ks)],
    },
    Migration {
        version: 5,
        description: "tables checkpoints and checkpoint_segments: a generation's segments saved, for recovery",
        // Builds of versions 2 to 4 never read them.
        oldest_reader: 2,
        statements: |ks| vec![checkpoints_table(ks), checkpoint_segments_table(ks)],
    },
];

/// The schema version this build needs, and the newest it knows.
pub const SCHEMA_VERSION: u32 = MIGRATIONS[MIGRATIONS.len() - 1].version;

/// The table of keys: one key is one partition, so a lookup binds the whole partition key and
/// `token(filter, key)` cuts a rebuild's scan into ranges.
pub fn keys_table(keyspace: &str) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {keyspace}.keys (filter text, key blob, value blob, PRIMARY KEY ((filter, key)))"
    )
}

/// The table of filter definitions, as migration 1 makes it (migration 2 adds `format`).
pub fn filters_table(keyspace: &str) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {keyspace}.filters (name text PRIMARY KEY, key_format text, capacity bigint, fp_rate double, segment_bytes bigint)"
    )
}

/// The table of drop records (`store::drop_record`): one row per name ever dropped, kept for
/// good, each in its format.
pub fn dropped_filters_table(keyspace: &str) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {keyspace}.dropped_filters (name text PRIMARY KEY, format int, key_format text, last_generation bigint, dropped_at timestamp)"
    )
}

/// The cluster version (`cluster_version`): one row, `scope = 'cluster'`, raised by a
/// lightweight transaction, never lowered.
pub fn cluster_version_table(keyspace: &str) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {keyspace}.cluster_version (scope text PRIMARY KEY, format int, version int, raised_at timestamp)"
    )
}

/// The origins' reports that they run, and the cluster version each knows; a report not
/// renewed expires (its origin is gone).
pub fn origin_reports_table(keyspace: &str) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {keyspace}.origin_reports (origin text PRIMARY KEY, format int, release text, knows int, reported_at timestamp) WITH default_time_to_live = 120"
    )
}

/// The log of recent writes (`store::recent_writes`): a filter's writes of one bucket of time
/// in one partition, expiring after an hour. Rows only ever expire, all of a time window at
/// once: time-window compaction drops whole files of them.
pub fn recent_writes_table(keyspace: &str) -> String {
    let ttl = crate::store::recent_writes::RETAINED.as_secs();
    format!(
        "CREATE TABLE IF NOT EXISTS {keyspace}.recent_writes (filter text, bucket bigint, written_at timestamp, key blob, format int, PRIMARY KEY ((filter, bucket), written_at, key)) WITH default_time_to_live = {ttl} AND gc_grace_seconds = {ttl} AND compaction = {{'class': 'TimeWindowCompactionStrategy', 'compaction_window_unit': 'MINUTES', 'compaction_window_size': 10}}"
    )
}

/// Each filter's newest checkpoint (`store::checkpoint`): the generation, its params, and `R`.
pub fn checkpoints_table(keyspace: &str) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {keyspace}.checkpoints (filter text PRIMARY KEY, format int, generation bigint, params text, taken_at timestamp)"
    )
}

/// The segments saved for a generation: one partition per (filter, generation), a row per
/// segment with the version and incarnation its bits were read at.
pub fn checkpoint_segments_table(keyspace: &str) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {keyspace}.checkpoint_segments (filter text, generation bigint, segment int, format int, version bigint, incarnation bigint, bits blob, PRIMARY KEY ((filter, generation), segment))"
    )
}

/// The cluster version's row, inserted unless one exists (version, format, raised at).
pub fn start_cluster_version_statement(keyspace: &str) -> String {
    format!(
        "INSERT INTO {keyspace}.cluster_version (scope, version, format, raised_at) VALUES ('cluster', ?, ?, ?) IF NOT EXISTS"
    )
}

/// The storage-attached index on the keys' `filter`: what lets a rebuild or a drop read only
/// its own filter's keys; without it they read the whole table.
pub fn filter_index(keyspace: &str) -> String {
    format!("CREATE CUSTOM INDEX IF NOT EXISTS {FILTER_INDEX} ON {keyspace}.keys (filter) USING 'StorageAttachedIndex'")
}

/// The keyspace, with `replication` (a clause such as
/// `{'class': 'NetworkTopologyStrategy', 'dc1': 3}`).
pub fn keyspace_statement(keyspace: &str, replication: &str) -> String {
    format!("CREATE KEYSPACE IF NOT EXISTS {keyspace} WITH replication = {replication}")
}

/// The table recording which migrations a keyspace has, as version 2 made it (without
/// `oldest_reader`: see [`migrations_table_columns`]).
pub fn migrations_table(keyspace: &str) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {keyspace}.schema_migrations (version int PRIMARY KEY, description text, applied_at timestamp)"
    )
}

/// The columns the migrations table gained since: run before any migration is recorded, on a
/// table of any age (a no-op where they exist).
pub fn migrations_table_columns(keyspace: &str) -> String {
    format!("ALTER TABLE {keyspace}.schema_migrations ADD IF NOT EXISTS oldest_reader int")
}

/// The statement that records a migration, its version, description and oldest reader bound.
pub fn record_statement(keyspace: &str) -> String {
    format!(
        "INSERT INTO {keyspace}.schema_migrations (version, description, oldest_reader, applied_at) VALUES (?, ?, ?, toTimestamp(now()))"
    )
}

/// One row of `schema_migrations`: a migration applied, and the oldest schema version a build
/// may know and still run on it (None: recorded before that was, or by hand; read as the
/// version itself).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Recorded {
    /// The migration's version.
    pub version: u32,
    /// Its oldest reader, if recorded.
    pub oldest_reader: Option<u32>,
}

impl Recorded {
    /// A migration recorded without its oldest reader: only builds that know it run on it.
    pub fn strict(version: u32) -> Recorded {
        Recorded { version, oldest_reader: None }
    }
}

/// The migrations a keyspace that recorded `recorded` still lacks, oldest first.
pub fn pending(recorded: &[Recorded]) -> Vec<&'static Migration> {
    MIGRATIONS.iter().filter(|m| !recorded.iter().any(|r| r.version == m.version)).collect()
}

/// What a keyspace's recorded versions mean for an origin of this build.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VersionCheck {
    /// At [`SCHEMA_VERSION`]: this origin runs on it.
    Current,
    /// Older (0: nothing recorded): migrations must be applied first.
    Behind {
        /// The newest version recorded.
        found: u32,
        /// [`SCHEMA_VERSION`].
        needed: u32,
    },
    /// Newer than this build knows, but every migration it does not know lets it run: it
    /// only added what this build never touches.
    AheadReadable {
        /// The newest version recorded.
        found: u32,
        /// [`SCHEMA_VERSION`].
        known: u32,
    },
    /// Newer than this build knows, with a migration that older builds would misread.
    Ahead {
        /// The newest version recorded.
        found: u32,
        /// [`SCHEMA_VERSION`].
        known: u32,
    },
}

impl VersionCheck {
    /// The check of a keyspace whose `schema_migrations` holds `recorded`: its newest version
    /// against [`SCHEMA_VERSION`], and past it, the oldest reader of every migration this build
    /// does not know.
    pub fn of(recorded: &[Recorded]) -> VersionCheck {
        let found = recorded.iter().map(|r| r.version).max().unwrap_or(0);
        let known = SCHEMA_VERSION;
        let readable =
            recorded.iter().filter(|r| r.version > known).all(|r| r.oldest_reader.unwrap_or(r.version) <= known);
        match found.cmp(&known) {
            std::cmp::Ordering::Equal => VersionCheck::Current,
            std::cmp::Ordering::Less => VersionCheck::Behind { found, needed: known },
            std::cmp::Ordering::Greater if readable => VersionCheck::AheadReadable { found, known },
            std::cmp::Ordering::Greater => VersionCheck::Ahead { found, known },
        }
    }

    /// Why an origin on `keyspace` refuses to run, and what to do; `None` when it runs.
    pub fn refusal(&self, keyspace: &str) -> Option<String> {
        match *self {
            VersionCheck::Current | VersionCheck::AheadReadable { .. } => None,
            VersionCheck::Behind { found, needed } => Some(format!(
                "keyspace {keyspace}: the schema is at version {found}{}, this origin needs {needed}: run `bloomgate-origin schema apply` (or `schema print` and apply it through cqlsh)",
                if found == 0 { " (none recorded)" } else { "" }
            )),
            VersionCheck::Ahead { found, known } => Some(format!(
                "keyspace {keyspace}: the schema is at version {found}, newer than this origin knows ({known}): upgrade this origin"
            )),
        }
    }
}

/// What to set `cassandra_replication` to, for the message that asks for it.
const REPLICATION_ADVICE: &str = "Set cassandra_replication (BLOOMGATE_CASSANDRA_REPLICATION). In production: {'class': 'NetworkTopologyStrategy', 'datacenter1': 3}, three replicas in each data centre (named as SELECT data_center FROM system.local names them), read and written at local_quorum. For a single-node test cluster only: {'class': 'SimpleStrategy', 'replication_factor': 1}";

/// The replication a keyspace that does not exist yet is created with: the setting's clause,
/// which must be given (there is no default: one replica loses keys with a disk).
pub fn replication_for_new_keyspace<'a>(keyspace: &str, replication: &'a str) -> Result<&'a str, String> {
    match replication.trim() {
        "" => Err(format!(
            "keyspace {keyspace} does not exist, and creating it needs its replication, which is not set. {REPLICATION_ADVICE}"
        )),
        clause => Ok(clause),
    }
}

/// The whole script for cqlsh (`cqlsh -f`): the keyspace, the migrations table, then every
/// migration followed by the row that records it. Run whole on a keyspace at any version, it
/// brings it to [`SCHEMA_VERSION`]: every statement is a no-op where its object exists.
pub fn script(keyspace: &str, replication: &str) -> Result<String, String> {
    let replication = match replication.trim() {
        "" => {
            return Err(format!(
                "the script creates keyspace {keyspace}, which needs its replication. {REPLICATION_ADVICE}"
            ))
        }
        clause => clause,
    };
    let mut out = format!(
        "-- bloomgate schema, version {SCHEMA_VERSION}, for keyspace {keyspace} (bloomgate-origin schema print).\n\
         -- Every statement is a no-op where its object exists: run it whole (cqlsh -f), at any version.\n\n\
         {};\n{};\n{};\n",
        keyspace_statement(keyspace, replication),
        migrations_table(keyspace),
        migrations_table_columns(keyspace)
    );
    for migration in MIGRATIONS {
        out.push_str(&format!("\n-- version {}: {}\n", migration.version, migration.description));
        for statement in migration.statements(keyspace) {
            out.push_str(&format!("{statement};\n"));
        }
        out.push_str(&format!(
            "INSERT INTO {keyspace}.schema_migrations (version, description, oldest_reader, applied_at) VALUES ({}, '{}', {}, toTimestamp(now()));\n",
            migration.version,
            migration.description.replace('\'', "''"),
            migration.oldest_reader
        ));
    }
    out.push_str(
        "\n-- The cluster version is not recorded here: a keyspace without one is at version 1.\n\
         -- Once every origin runs this release: bloomgate-origin upgrade finish.\n",
    );
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NTS: &str = "{'class': 'NetworkTopologyStrategy', 'dc1': 3}";

    #[test]
    fn versions_count_up_from_one_and_the_newest_is_the_schema_version() {
        let versions: Vec<u32> = MIGRATIONS.iter().map(|m| m.version).collect();
        assert_eq!(versions, (1..=MIGRATIONS.len() as u32).collect::<Vec<_>>());
        assert_eq!(SCHEMA_VERSION, 5);
        assert!(MIGRATIONS[1].statements("bg") == ["ALTER TABLE bg.filters ADD IF NOT EXISTS format int"]);
        assert!(MIGRATIONS[2].statements("bg")[0]
            .starts_with("CREATE TABLE IF NOT EXISTS bg.dropped_filters (name text PRIMARY KEY, format int"));
    }

    #[test]
    fn pending_is_every_migration_not_recorded_oldest_first() {
        let versions = |recorded: &[u32]| {
            let recorded: Vec<Recorded> = recorded.iter().copied().map(Recorded::strict).collect();
            pending(&recorded).iter().map(|m| m.version).collect::<Vec<_>>()
        };
        assert_eq!(versions(&[]), [1, 2, 3, 4, 5]);
        assert_eq!(versions(&[1]), [2, 3, 4, 5]);
        assert_eq!(versions(&[1, 2, 3, 4, 5]), Vec::<u32>::new());
        assert_eq!(versions(&[2, 3, 4, 5]), [1], "a gap is filled: applying is idempotent");
        assert_eq!(
            versions(&[1, 2, 3, 4, 5, 6]),
            Vec::<u32>::new(),
            "versions this build does not know are not its to apply"
        );
    }

    fn strict(versions: &[u32]) -> Vec<Recorded> {
        versions.iter().copied().map(Recorded::strict).collect()
    }

    /// What this build records for its own migrations.
    fn as_applied() -> Vec<Recorded> {
        MIGRATIONS.iter().map(|m| Recorded { version: m.version, oldest_reader: Some(m.oldest_reader) }).collect()
    }

    #[test]
    fn the_version_check_says_whether_this_build_runs_and_if_not_what_to_do() {
        assert_eq!(VersionCheck::of(&as_applied()), VersionCheck::Current);
        assert_eq!(VersionCheck::of(&strict(&[1, 2, 3, 4, 5])), VersionCheck::Current);
        assert_eq!(VersionCheck::Current.refusal("bg"), None);

        let behind = VersionCheck::of(&strict(&[1, 2]));
        assert_eq!(behind, VersionCheck::Behind { found: 2, needed: 5 });
        let message = behind.refusal("bg").unwrap();
        assert!(message.contains("keyspace bg: the schema is at version 2, this origin needs 5"), "{message}");
        assert!(message.contains("run `bloomgate-origin schema apply`"), "{message}");
        assert!(message.contains("`schema print` and apply it through cqlsh"), "{message}");
        let none = VersionCheck::of(&[]).refusal("bg").unwrap();
        assert!(none.contains("at version 0 (none recorded), this origin needs 5"), "{none}");

        // A newer migration that does not say who can read past it: refused.
        let ahead = VersionCheck::of(&strict(&[1, 2, 3, 4, 5, 6]));
        assert_eq!(ahead, VersionCheck::Ahead { found: 6, known: 5 });
        let message = ahead.refusal("bg").unwrap();
        assert!(
            message.contains("the schema is at version 6, newer than this origin knows (5): upgrade this origin"),
            "{message}"
        );
        // Newer migrations that only added what this build never touches: it runs.
        let mut added = as_applied();
        added.push(Recorded { version: 6, oldest_reader: Some(5) });
        added.push(Recorded { version: 7, oldest_reader: Some(2) });
        assert_eq!(VersionCheck::of(&added), VersionCheck::AheadReadable { found: 7, known: 5 });
        assert_eq!(VersionCheck::of(&added).refusal("bg"), None);
        // One of them that older builds would misread is enough to refuse.
        added.push(Recorded { version: 8, oldest_reader: Some(6) });
        assert_eq!(VersionCheck::of(&added), VersionCheck::Ahead { found: 8, known: 5 });
    }

    #[test]
    fn the_previous_schema_version_runs_on_this_one() {
        // What a build of version 2 sees of a keyspace this build applied: a rollback, or a
        // pod of the previous release restarting mid-upgrade, runs on it.
        let newer: Vec<&Migration> = MIGRATIONS.iter().filter(|m| m.version > 2).collect();
        assert!(!newer.is_empty());
        assert!(newer.iter().all(|m| m.oldest_reader <= 2), "{newer:?}");
        assert!(MIGRATIONS.iter().all(|m| m.oldest_reader <= m.version));
    }

    #[test]
    fn a_new_keyspace_needs_its_replication_set_and_an_explicit_single_replica_is_accepted() {
        let err = replication_for_new_keyspace("bg", " ").unwrap_err();
        assert!(err.contains("keyspace bg does not exist"), "{err}");
        assert!(err.contains("{'class': 'NetworkTopologyStrategy', 'datacenter1': 3}"), "{err}");
        assert!(err.contains("{'class': 'SimpleStrategy', 'replication_factor': 1}"), "{err}");
        assert_eq!(replication_for_new_keyspace("bg", NTS), Ok(NTS));
        let single = "{'class': 'SimpleStrategy', 'replication_factor': 1}";
        assert_eq!(replication_for_new_keyspace("bg", single), Ok(single));
    }

    #[test]
    fn the_script_holds_every_statement_and_the_rows_recording_them_in_order() {
        let script = script("bg", NTS).unwrap();
        let mut expected = vec![keyspace_statement("bg", NTS), migrations_table("bg"), migrations_table_columns("bg")];
        for m in MIGRATIONS {
            expected.extend(m.statements("bg"));
            expected.push(format!(
                "INSERT INTO bg.schema_migrations (version, description, oldest_reader, applied_at) VALUES ({}, '{}', {}, toTimestamp(now()))",
                m.version,
                m.description.replace('\'', "''"),
                m.oldest_reader
            ));
        }
        let mut at = 0;
        for statement in &expected {
            let found = script[at..].find(&format!("{statement};\n"));
            at += found.unwrap_or_else(|| panic!("missing or out of order: {statement}\n{script}")) + statement.len();
        }
        let statements = script.lines().filter(|l| !l.is_empty() && !l.starts_with("--")).count();
        assert_eq!(statements, expected.len(), "nothing else but comments:\n{script}");
        assert!(script.contains("PRIMARY KEY ((filter, key))"));
        assert!(script.contains("CREATE CUSTOM INDEX IF NOT EXISTS keys_by_filter ON bg.keys (filter)"));
        assert!(super::script("bg", "").unwrap_err().contains("NetworkTopologyStrategy"));
    }

    #[test]
    fn quotes_in_a_description_are_escaped_for_cql() {
        let script = script("bg", NTS).unwrap();
        assert!(script.contains("'filters.format: the format a filter''s definition is written in'"), "{script}");
    }
}
