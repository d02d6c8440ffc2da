//! The Redis Cluster that `scripts/services start --topology cluster redis` runs (3 masters,
//! a replica each), for tests that kill its masters: its nodes as `scripts/services
//! cluster-nodes redis` lists them (which process to kill, which replica should take over),
//! the call that brings a killed node back (it rejoins as a replica), and direct connections
//! to single nodes.

use anyhow::Context as _;
use std::path::PathBuf;
use std::process::Command;

/// One line of the listing: `port role master_port|- pid|-`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RedisNode {
    /// Its port on 127.0.0.1.
    pub port: u16,
    /// `master`, `replica`, `hung` or `down`.
    pub role: String,
    /// A replica's master.
    pub master_port: Option<u16>,
    /// Its process, if running.
    pub pid: Option<u32>,
}

/// Parses the listing; lines that are not a node are skipped.
pub fn parse_listing(text: &str) -> Vec<RedisNode> {
    text.lines()
        .filter_map(|line| match line.split_whitespace().collect::<Vec<_>>()[..] {
            [port, role, master, pid] => Some(RedisNode {
                port: port.parse().ok()?,
                role: role.to_owned(),
                master_port: master.parse().ok(),
                pid: pid.parse().ok(),
            }),
            _ => None,
        })
        .collect()
}

fn services() -> PathBuf {
    crate::repo_root().join("scripts/services")
}

/// The cluster's nodes now.
pub fn list() -> anyhow::Result<Vec<RedisNode>> {
    let out = Command::new(services()).args(["cluster-nodes", "redis"]).output().context("run scripts/services")?;
    anyhow::ensure!(
        out.status.success(),
        "`scripts/services cluster-nodes redis` failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(parse_listing(&String::from_utf8_lossy(&out.stdout)))
}

/// Starts every node of the cluster that is not running (a killed master comes back and
/// rejoins as a replica of the node that took its place) and waits until the cluster is ok.
pub fn restart_dead_nodes() -> anyhow::Result<()> {
    let out = Command::new(services())
        .args(["start", "--topology", "cluster", "redis"])
        .output()
        .context("run scripts/services")?;
    anyhow::ensure!(
        out.status.success(),
        "`scripts/services start --topology cluster redis` failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

/// Nodes to reach the cluster through (`host:port`; after failovers, masters or replicas):
/// `BG_TEST_REDIS_CLUSTER`, else the first three ports `scripts/services` uses.
pub fn seed_nodes() -> Vec<String> {
    std::env::var("BG_TEST_REDIS_CLUSTER")
        .unwrap_or_else(|_| "127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003".into())
        .split(',')
        .map(str::to_owned)
        .collect()
}

/// Panics with the command that starts the cluster unless a node in [`seed_nodes`] accepts
/// connections (the client learns the others from it; one may be down on purpose).
pub async fn require() -> Vec<String> {
    let seeds = seed_nodes();
    for node in &seeds {
        let reachable =
            tokio::time::timeout(std::time::Duration::from_secs(3), tokio::net::TcpStream::connect(node)).await;
        if matches!(reachable, Ok(Ok(_))) {
            return seeds;
        }
    }
    panic!(
        "no Redis Cluster node of {seeds:?} is reachable: start the cluster with `scripts/services start --topology cluster redis` (or name its nodes in BG_TEST_REDIS_CLUSTER)"
    )
}

/// A connection to the one node on `port` (not the cluster client): for its own INFO,
/// CONFIG SET and keys.
pub async fn node(port: u16) -> redis::aio::MultiplexedConnection {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap();
    client.get_multiplexed_async_connection().await.unwrap_or_else(|e| panic!("connect to Redis node {port}: {e}"))
}

/// A field of a node's `INFO` text, by exact name (the origin's own reader).
pub use bloomgate_origin::store::redis::link::info_field;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_listing_names_masters_their_replicas_and_pids() {
        let nodes = parse_listing("7001 master - 100\n7004 replica 7001 103\n7002 down - -\nnoise\n");
        assert_eq!(nodes.len(), 3);
        assert_eq!(nodes[0], RedisNode { port: 7001, role: "master".into(), master_port: None, pid: Some(100) });
        assert_eq!(nodes[1].master_port, Some(7001));
        assert_eq!(nodes[2].pid, None);
    }
}
