//! The shared Cassandra as a chaos run uses it: paused with SIGSTOP for a fault and always
//! continued (on every way out, a panic included), found by its pid file, read directly to check
//! every acknowledged key at the end, and the run's keyspace dropped.

use crate::history::DbCheck;
use crate::keys::{KeyId, KeySpace};
use anyhow::Context as _;
use bloomgate_tests::procs::signal;
use futures::StreamExt;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// The Cassandra process a [`CassandraPause`] stopped, 0 if none: continued by
/// [`resume_cassandra`] from a panic hook or a signal handler too.
static PAUSED_CASSANDRA: AtomicU32 = AtomicU32::new(0);

/// Continues Cassandra if this process stopped it. Safe to call any number of times.
pub fn resume_cassandra() {
    let pid = PAUSED_CASSANDRA.swap(0, Ordering::SeqCst);
    if pid != 0 {
        signal(pid, "CONT");
    }
}

/// Cassandra stopped with SIGSTOP; continued (SIGCONT) when dropped, also while unwinding.
pub struct CassandraPause(());

impl CassandraPause {
    /// Stops the process.
    pub fn stop(pid: u32) -> anyhow::Result<CassandraPause> {
        PAUSED_CASSANDRA.store(pid, Ordering::SeqCst);
        anyhow::ensure!(signal(pid, "STOP"), "kill -STOP {pid} failed");
        Ok(CassandraPause(()))
    }
}

impl Drop for CassandraPause {
    fn drop(&mut self) {
        resume_cassandra();
    }
}

/// Finds Cassandra's pid: `BG_CASSANDRA_PID_FILE`, else the pid file that
/// `scripts/services` writes in this checkout, else in the main checkout of a git worktree.
pub fn cassandra_pid(explicit: Option<&Path>) -> Option<(u32, PathBuf)> {
    let root = bloomgate_tests::repo_root();
    let mut candidates: Vec<PathBuf> = explicit.map(Path::to_path_buf).into_iter().collect();
    candidates.extend(std::env::var_os("BG_CASSANDRA_PID_FILE").map(PathBuf::from));
    candidates.push(root.join(".state/run/cassandra.pid"));
    let common = Command::new("git").current_dir(&root).args(["rev-parse", "--git-common-dir"]).output().ok();
    if let Some(out) = common.filter(|o| o.status.success()) {
        let dir = root.join(String::from_utf8_lossy(&out.stdout).trim());
        if let Some(main) = dir.parent() {
            candidates.push(main.join(".state/run/cassandra.pid"));
        }
    }
    candidates.into_iter().find_map(|path| {
        let pid: u32 = std::fs::read_to_string(&path).ok()?.trim().parse().ok()?;
        Path::new(&format!("/proc/{pid}")).exists().then_some((pid, path))
    })
}

/// A session on the Cassandra at `cassandra`.
pub async fn session(cassandra: &str) -> anyhow::Result<scylla::client::session::Session> {
    scylla::client::session_builder::SessionBuilder::new()
        .known_node(cassandra)
        .build()
        .await
        .with_context(|| format!("connect to Cassandra at {cassandra}"))
}

/// Reads every key directly from Cassandra (LOCAL_QUORUM, as the origins write), 64 at a
/// time, each tried up to three times.
pub async fn read_back(
    cassandra: &str,
    keyspace: &str,
    filter: &str,
    keys: &KeySpace,
    acked: BTreeSet<KeyId>,
) -> anyhow::Result<Vec<DbCheck>> {
    let session = session(cassandra).await?;
    let mut select = session.prepare(format!("SELECT key FROM {keyspace}.keys WHERE filter = ? AND key = ?")).await?;
    select.set_consistency(scylla::statement::Consistency::LocalQuorum);
    let (session, select) = (&session, &select);
    let checks = futures::stream::iter(acked)
        .map(|key| async move {
            let bytes = keys.bytes(key).to_vec();
            for attempt in 0..3 {
                match session.execute_unpaged(select, (filter, &bytes)).await {
                    Ok(result) => {
                        let rows = result.into_rows_result().map(|r| r.rows_num()).unwrap_or(0);
                        return DbCheck { key, present: Some(rows > 0) };
                    }
                    Err(e) if attempt == 2 => eprintln!("chaos: cannot read {key} back: {e}"),
                    Err(_) => tokio::time::sleep(Duration::from_millis(500)).await,
                }
            }
            DbCheck { key, present: None }
        })
        .buffer_unordered(64)
        .collect()
        .await;
    Ok(checks)
}

/// Drops the run's keyspace; a failure is printed, not returned (the run's result stands).
pub async fn drop_keyspace(cassandra: &str, keyspace: &str) {
    let dropped = match session(cassandra).await {
        Ok(s) => s
            .query_unpaged(format!("DROP KEYSPACE IF EXISTS {keyspace}"), ())
            .await
            .map(|_| ())
            .map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    };
    if let Err(e) = dropped {
        eprintln!("chaos: keyspace {keyspace} not dropped: {e}");
    }
}
