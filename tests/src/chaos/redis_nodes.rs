//! The Redis Cluster's nodes as `scripts/services cluster-nodes redis` lists them, for the
//! fault that kills a master: which process to kill, which replica should take over, and
//! the call that brings the killed node back (it rejoins as a replica).

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
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/services")
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
