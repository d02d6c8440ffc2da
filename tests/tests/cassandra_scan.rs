//! The rebuild's scan reads only its own filter's keys, through the index on `filter`, and
//! still reads every one of them; on a schema without the index it reads the whole table and
//! gives the same keys.
//!
//! Needs `scripts/services start` (Cassandra).

use bloomgate_origin::store::cassandra::migrations;
use bloomgate_origin::store::cassandra::{CassandraDatabase, CassandraSettings};
use bloomgate_origin::store::Database;
use bloomgate_tests::{cassandra_addr, require, unique_filter};
use std::collections::BTreeSet;
use std::sync::Mutex;
use std::time::{Duration, Instant};

const REPLICATION: &str = "{'class': 'SimpleStrategy', 'replication_factor': 1}";

fn settings(keyspace: &str, manage_schema: bool) -> CassandraSettings {
    CassandraSettings {
        nodes: vec![cassandra_addr()],
        keyspace: keyspace.into(),
        replication: REPLICATION.into(),
        manage_schema,
        consistency: scylla::statement::Consistency::One,
        timeout: Duration::from_secs(10),
        delete_margin: Duration::from_millis(500),
        access: Default::default(),
    }
}

async fn put_keys(db: &CassandraDatabase, filter: &str, n: u32) -> BTreeSet<Vec<u8>> {
    let keys: BTreeSet<Vec<u8>> = (0..n).map(|i| format!("{filter}-{i}").into_bytes()).collect();
    let puts = keys.iter().map(|k| db.put(filter, k, b""));
    for chunk in futures::future::join_all(puts).await {
        chunk.unwrap();
    }
    keys
}

async fn scan(db: &CassandraDatabase, filter: &str) -> (BTreeSet<Vec<u8>>, Duration) {
    let seen = Mutex::new(BTreeSet::new());
    let started = Instant::now();
    db.scan_keys(filter, 4, &|k| {
        seen.lock().unwrap().insert(k.to_vec());
    })
    .await
    .unwrap();
    (seen.into_inner().unwrap(), started.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scan_reads_its_filter_s_keys_through_the_index_and_all_of_them() {
    require("Cassandra", &cassandra_addr()).await;
    let db = CassandraDatabase::connect(&settings("bloomgate_scan_test", true)).await.unwrap();
    assert!(db.scans_by_index(), "a managed schema has the filter index");
    let (small, big) = (unique_filter("small"), unique_filter("big"));
    let small_keys = put_keys(&db, &small, 300).await;
    put_keys(&db, &big, 3_000).await;
    let (seen, by_index) = scan(&db, &small).await;
    assert_eq!(seen, small_keys, "exactly the filter's keys");

    // The same keys from a schema without the index (made by hand by an operator who left
    // it out, recording no version): the whole table is read and filtered.
    let session = db.session();
    let bare = format!("bloomgate_scan_noindex_{:08x}", rand::random::<u32>());
    let by_hand = [
        migrations::keyspace_statement(&bare, REPLICATION),
        migrations::keys_table(&bare),
        migrations::filters_table(&bare),
        format!("ALTER TABLE {bare}.filters ADD format int"),
        migrations::dropped_filters_table(&bare),
        migrations::cluster_version_table(&bare),
        migrations::origin_reports_table(&bare),
        migrations::recent_writes_table(&bare),
        migrations::checkpoints_table(&bare),
        migrations::checkpoint_segments_table(&bare),
    ];
    for statement in &by_hand {
        session.query_unpaged(statement.as_str(), ()).await.unwrap();
    }
    session.await_schema_agreement().await.unwrap();
    let plain = CassandraDatabase::connect(&settings(&bare, false)).await.unwrap();
    assert!(!plain.scans_by_index());
    let small_keys = put_keys(&plain, &small, 300).await;
    put_keys(&plain, &big, 3_000).await;
    let (seen, whole) = scan(&plain, &small).await;
    assert_eq!(seen, small_keys, "the whole-table scan finds the same keys");
    eprintln!("300 keys of 3,300: {by_index:?} through the index, {whole:?} reading the whole table");
    session.query_unpaged(format!("DROP KEYSPACE {bare}"), ()).await.unwrap();
}
