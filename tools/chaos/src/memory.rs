//! Resident memory of the run's processes, sampled once a second: every origin, and the edge's
//! `workerd`s. `wrangler dev` is a Node process that starts a Node child that starts two
//! `workerd`s: one runs the Worker, the other wrangler's proxy in front of it (it listens on
//! the edge's port, and also runs wrangler's inspector proxy). They are found by walking
//! `/proc` for `workerd`s whose parent chain leads to the wrangler process the harness
//! started. A V8 heap that grows until it dies shows here long before the edge stops
//! answering.

use crate::cluster::Cluster;
use crate::history::{Process, Recorder, RssSample};
use bloomgate_tests::procs::{cmdline, descendants_named, is_named, processes, rss_kib};
use std::sync::Arc;
use std::time::Duration;

/// Which of the edge's processes a `workerd` is, from its arguments: the proxy listens on
/// the edge's port (`--socket-addr=entry=127.0.0.1:<port>`), the Worker's on a port of its own.
fn edge_role(args: &[String], edge_port: u16) -> Process {
    let proxy = args.iter().any(|a| a.starts_with("--socket-addr=entry=") && a.ends_with(&format!(":{edge_port}")));
    if proxy {
        Process::EdgeProxy
    } else {
        Process::EdgeWorker
    }
}

/// The `workerd`s under the wrangler process `wrangler`, with their roles.
pub fn edge_processes(wrangler: u32, edge_port: u16) -> Vec<(u32, Process)> {
    descendants_named(&processes(), wrangler, "workerd")
        .into_iter()
        .map(|pid| (pid, edge_role(&cmdline(pid), edge_port)))
        .collect()
}

/// Samples every origin's RSS, and the edge's `workerd`s', once a second.
pub async fn sample_rss(cluster: Arc<Cluster>, rec: Arc<Recorder>) {
    let mut edge_procs: Vec<(u32, Process)> = Vec::new();
    loop {
        for origin in &cluster.origins {
            if let Some(pid) = origin.pid() {
                if let Some(kib) = rss_kib(pid) {
                    rec.rss(RssSample { process: Process::Origin(origin.index), pid, at: rec.now(), kib });
                }
            }
        }
        if let Some(edge) = &cluster.edge {
            // Looked up again only when one known is gone (a restart, a crash) or none is.
            if edge_procs.is_empty() || !edge_procs.iter().all(|(pid, _)| is_named(*pid, "workerd")) {
                edge_procs = edge_processes(edge.wrangler.pid(), edge.wrangler.port());
            }
            for (pid, process) in &edge_procs {
                if let Some(kib) = rss_kib(*pid) {
                    rec.rss(RssSample { process: *process, pid: *pid, at: rec.now(), kib });
                }
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_workerd_on_the_edge_port_is_the_proxy() {
        let args = |entry: &str| -> Vec<String> {
            ["workerd", "serve", "--binary", entry, "--control-fd=3", "-"].map(str::to_owned).to_vec()
        };
        assert_eq!(edge_role(&args("--socket-addr=entry=127.0.0.1:18787"), 18787), Process::EdgeProxy);
        assert_eq!(edge_role(&args("--socket-addr=entry=127.0.0.1:0"), 18787), Process::EdgeWorker);
        assert_eq!(edge_role(&args("--socket-addr=entry=127.0.0.1:187870"), 18787), Process::EdgeWorker);
    }
}
