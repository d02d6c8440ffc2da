//! Reads see every acknowledged write only while R + W > RF. The origin checks that at
//! start-up, and an operator can still raise the keyspace's replication factor afterwards
//! (`ALTER KEYSPACE`): then a read at ONE may ask a replica that never got an acknowledged
//! write, and bloomgate would answer "not seen". So every read and write is checked against the
//! replication in the driver's schema metadata, and refused once it no longer overlaps: a
//! rebuild's scan, "any key?" and the definitions included.
//!
//! # Running
//! `scripts/services start` (Cassandra), then
//! `cargo test -p bloomgate-tests --test replication_change`.

use bloomgate_origin::store::cassandra::{CassandraDatabase, CassandraSettings};
use bloomgate_origin::store::Database;
use bloomgate_tests::{cassandra_addr, require, unique_filter};
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raising_the_replication_factor_past_the_level_stops_reads_and_writes() {
    require("Cassandra", &cassandra_addr()).await;
    let keyspace = format!("bloomgate_rf_{:08x}", rand::random::<u32>());
    let settings = CassandraSettings {
        nodes: vec![cassandra_addr()],
        keyspace: keyspace.clone(),
        replication: "{'class': 'SimpleStrategy', 'replication_factor': 1}".into(),
        manage_schema: true,
        consistency: scylla::statement::Consistency::One,
        timeout: Duration::from_secs(10),
        delete_margin: Duration::ZERO,
        access: Default::default(),
    };
    let db = CassandraDatabase::connect(&settings).await.unwrap();
    let (filter, key) = (unique_filter("rf"), b"acknowledged".to_vec());
    db.put(&filter, &key, b"").await.unwrap();
    assert!(db.get(&filter, &key).await.unwrap().is_some());

    let alter = |rf: u32| {
        format!(
            "ALTER KEYSPACE {keyspace} WITH replication = {{'class': 'SimpleStrategy', 'replication_factor': {rf}}}"
        )
    };
    db.session().query_unpaged(alter(3), ()).await.unwrap();
    // The driver refreshes its metadata on the schema change event; refreshed here too, so the
    // test does not wait on the event's timing.
    db.session().refresh_metadata().await.unwrap();
    let read = db.get(&filter, &key).await;
    let err = read.expect_err("a read at ONE with three replicas was answered: it could miss an acknowledged write");
    assert!(err.to_string().contains("R + W > RF"), "the refusal says why: {err}");
    assert!(db.put(&filter, b"another", b"").await.is_err(), "a write at ONE with three replicas was acknowledged");
    assert!(db.delete(&filter, &key).await.is_err());
    // What a rebuild and a drop read: the scan, "any key?" and the definitions, refused alike.
    let scanned = db.scan_keys(&filter, 1, &|_| {}).await;
    assert!(
        scanned.is_err_and(|e| e.to_string().contains("R + W > RF")),
        "a rebuild's scan at ONE with three replicas"
    );
    assert!(db.has_keys(&filter).await.is_err(), "'no key' from one of three replicas could start a filter empty");
    assert!(db.filters().await.is_err() && db.filter(&filter).await.is_err());
    assert!(db.delete_keys(&filter, 1).await.is_err());

    db.session().query_unpaged(alter(1), ()).await.unwrap();
    db.session().refresh_metadata().await.unwrap();
    assert!(db.get(&filter, &key).await.unwrap().is_some(), "back to one replica: reads go on");
    db.session().query_unpaged(format!("DROP KEYSPACE {keyspace}"), ()).await.unwrap();
}
