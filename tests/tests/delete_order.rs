//! A delete removes every write acknowledged before it and never hides a write made after
//! its acknowledgement, whichever origin's clock runs ahead: Cassandra keeps the write or
//! delete with the highest timestamp, so the origins stamp both, deletes a skew margin ahead,
//! and a delete waits twice the margin before it is acknowledged
//! (`bloomgate_origin::store::cassandra::write_order`).
//!
//! # Running
//! `scripts/services start` (Cassandra), then
//! `cargo test -p bloomgate-tests --test delete_order`. Origins whose clocks differ are two
//! readings of one clock here: the store's `put_at` takes the reading, `delete_at` the clock.

use bloomgate_origin::clock::now_us;
use bloomgate_origin::store::cassandra::{CassandraDatabase, CassandraSettings};
use bloomgate_origin::store::Database;
use bloomgate_tests::{cassandra_addr, require, unique_filter};
use std::time::Duration;

fn settings(delete_margin: Duration) -> CassandraSettings {
    CassandraSettings {
        nodes: vec![cassandra_addr()],
        keyspace: "bloomgate_test".into(),
        replication: "{'class': 'SimpleStrategy', 'replication_factor': 1}".into(),
        manage_schema: true,
        consistency: scylla::statement::Consistency::One,
        timeout: Duration::from_secs(10),
        delete_margin,
        access: Default::default(),
    }
}

/// A key written, deleted by an origin whose clock runs `ahead` of the writer's, then written
/// again by the writer after the delete was acknowledged: whether the second write is kept.
async fn rewrite_after_a_delete_from_a_clock_ahead(db: &CassandraDatabase, ahead: Duration) -> bool {
    let (filter, key) = (unique_filter("delete-order"), b"the key".to_vec());
    db.put_at(&filter, &key, b"first", now_us()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(5)).await;
    let deleter_clock = move || now_us() + ahead.as_micros() as u64;
    assert!(db.delete_at(&filter, &key, &deleter_clock).await.unwrap());
    db.put_at(&filter, &key, b"again", now_us()).await.unwrap();
    db.get(&filter, &key).await.unwrap().is_some()
}

/// A key written by an origin whose clock runs `ahead` of the deleter's, acknowledged, then
/// deleted: whether the delete removed it (what its `"deleted": true` says).
async fn delete_after_a_write_from_a_clock_ahead(db: &CassandraDatabase, ahead: Duration) -> bool {
    let (filter, key) = (unique_filter("delete-order"), b"the key".to_vec());
    db.put_at(&filter, &key, b"first", now_us() + ahead.as_micros() as u64).await.unwrap();
    assert!(db.delete_at(&filter, &key, &now_us).await.unwrap(), "the delete found the key");
    db.get(&filter, &key).await.unwrap().is_none()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delete_removes_every_earlier_write_and_hides_no_later_one_while_clocks_differ_by_less_than_the_margin() {
    require("Cassandra", &cassandra_addr()).await;
    let ahead = Duration::from_millis(300);
    // The hazards, with no margin: a delete from a clock ahead hides the write acknowledged
    // after it, and a delete from a clock behind leaves the write acknowledged before it.
    let no_margin = CassandraDatabase::connect(&settings(Duration::ZERO)).await.unwrap();
    assert!(
        !rewrite_after_a_delete_from_a_clock_ahead(&no_margin, ahead).await,
        "a delete stamped ahead did not hide the later write: the test would prove nothing"
    );
    assert!(
        !delete_after_a_write_from_a_clock_ahead(&no_margin, ahead).await,
        "a delete stamped behind removed the earlier write: the test would prove nothing"
    );
    // A margin above the clocks' difference: both promises hold.
    let margin = CassandraDatabase::connect(&settings(Duration::from_millis(500))).await.unwrap();
    assert!(
        rewrite_after_a_delete_from_a_clock_ahead(&margin, ahead).await,
        "an acknowledged write made after a delete was hidden by it"
    );
    assert!(
        delete_after_a_write_from_a_clock_ahead(&margin, ahead).await,
        "a delete answered as done left a write acknowledged before it"
    );
    // Even right after the write, on one clock: the delete's word holds at once.
    let filter = unique_filter("delete-order");
    margin.put_at(&filter, b"k", b"", now_us()).await.unwrap();
    let started = std::time::Instant::now();
    margin.delete_at(&filter, b"k", &now_us).await.unwrap();
    assert!(margin.get(&filter, b"k").await.unwrap().is_none(), "a delete right after a write left it");
    assert!(started.elapsed() >= Duration::from_millis(1000), "the delete waited out twice the margin");
}
