//! Resident memory of the run's processes, sampled once a second: every origin, and the edge's
//! `workerd`s. `wrangler dev` is a Node process that starts a Node child that starts two
//! `workerd`s: one runs the Worker, the other wrangler's proxy in front of it (it listens on
//! the edge's port, and also runs wrangler's inspector proxy). They are found by walking
//! `/proc` for `workerd`s whose parent chain leads to the wrangler process the harness
//! started. A V8 heap that grows until it dies shows here long before the edge stops
//! answering.

use super::cluster::Cluster;
use super::history::{Process, Recorder, RssSample};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// `VmRSS` of a process in KiB, from `/proc/<pid>/status`.
pub fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// A process's name and parent, from `/proc/<pid>/stat` (`pid (comm) state ppid ...`; the
/// name may hold spaces and parentheses, so it ends at the last `)`).
fn parse_stat(stat: &str) -> Option<(String, u32)> {
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    let name = stat.get(open + 1..close)?.to_owned();
    let ppid = stat.get(close + 1..)?.split_whitespace().nth(1)?.parse().ok()?;
    Some((name, ppid))
}

/// Every process: pid -> (name, parent).
fn processes() -> HashMap<u32, (String, u32)> {
    let Ok(dir) = std::fs::read_dir("/proc") else { return HashMap::new() };
    dir.filter_map(|entry| {
        let pid: u32 = entry.ok()?.file_name().to_str()?.parse().ok()?;
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        Some((pid, parse_stat(&stat)?))
    })
    .collect()
}

/// Processes named `name` that descend from `root`.
fn descendants_named(procs: &HashMap<u32, (String, u32)>, root: u32, name: &str) -> Vec<u32> {
    let mut found: Vec<u32> = procs
        .iter()
        .filter(|(_, (n, _))| n == name)
        .filter(|(pid, _)| {
            let mut at = **pid;
            // Bounded: a parent chain is short, and a pid reused meanwhile must not loop.
            for _ in 0..64 {
                match procs.get(&at) {
                    Some((_, parent)) if *parent == root => return true,
                    Some((_, parent)) if *parent > 1 => at = *parent,
                    _ => return false,
                }
            }
            false
        })
        .map(|(pid, _)| *pid)
        .collect();
    found.sort_unstable();
    found
}

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

fn cmdline(pid: u32) -> Vec<String> {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    raw.split(|b| *b == 0).filter(|a| !a.is_empty()).map(|a| String::from_utf8_lossy(a).into_owned()).collect()
}

fn is_workerd(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "workerd")
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
            if edge_procs.is_empty() || !edge_procs.iter().all(|(pid, _)| is_workerd(*pid)) {
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
    fn rss_of_this_process_is_readable() {
        assert!(rss_kib(std::process::id()).is_some_and(|k| k > 0));
    }

    #[test]
    fn stat_lines_give_name_and_parent() {
        assert_eq!(parse_stat("4242 (workerd) S 4200 4242 1 0 -1"), Some(("workerd".into(), 4200)));
        assert_eq!(parse_stat("7 (a (b) c) R 1 7 7"), Some(("a (b) c".into(), 1)));
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn workerd_is_found_under_its_wrangler_only() {
        let procs: HashMap<u32, (String, u32)> = [
            (100, ("node", 50)),  // wrangler, started by us (50)
            (101, ("node", 100)), // wrangler's child
            (102, ("workerd", 101)),
            (200, ("node", 1)), // another engineer's wrangler
            (201, ("workerd", 200)),
            (300, ("workerd", 1)),
        ]
        .into_iter()
        .map(|(pid, (name, parent))| (pid, (name.to_owned(), parent)))
        .collect();
        assert_eq!(descendants_named(&procs, 100, "workerd"), vec![102]);
        assert_eq!(descendants_named(&procs, 200, "workerd"), vec![201]);
        assert_eq!(descendants_named(&procs, 999, "workerd"), Vec::<u32>::new());
    }

    #[test]
    fn the_workerd_on_the_edge_port_is_the_proxy() {
        let args = |entry: &str| -> Vec<String> {
            ["workerd", "serve", "--binary", entry, "--control-fd=3", "-"].map(str::to_owned).to_vec()
        };
        assert_eq!(edge_role(&args("--socket-addr=entry=127.0.0.1:18787"), 18787), Process::EdgeProxy);
        assert_eq!(edge_role(&args("--socket-addr=entry=127.0.0.1:0"), 18787), Process::EdgeWorker);
        assert_eq!(edge_role(&args("--socket-addr=entry=127.0.0.1:187870"), 18787), Process::EdgeWorker);
    }

    #[test]
    fn this_process_is_found_under_its_parent() {
        let me = std::process::id();
        let procs = processes();
        let (name, parent) = procs.get(&me).cloned().unwrap();
        assert!(descendants_named(&procs, parent, &name).contains(&me));
    }
}
