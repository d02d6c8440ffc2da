//! The machine's processes, from `/proc`: who descends from whom, their names, arguments and
//! resident memory; and signals to the processes the harness started. The harnesses use it to
//! find `wrangler dev`'s `workerd`s, to sum the CPU and memory of what they started, and to
//! stop it.

use std::collections::HashMap;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// Sends signal `name` (`TERM`, `INT`, `KILL`, `STOP`, `CONT`) to `pid` with `kill` (the crates
/// forbid `unsafe`, so no libc); whether `kill` succeeded.
pub fn signal(pid: u32, name: &str) -> bool {
    Command::new("kill").arg(format!("-{name}")).arg(pid.to_string()).status().is_ok_and(|s| s.success())
}

/// Stops a child the harness started: signal `name` (a graceful stop), then SIGKILL if it has
/// not exited within `grace`.
pub fn stop(child: &mut Child, name: &str, grace: Duration) {
    signal(child.id(), name);
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// Processes whose command line (arguments joined by spaces) contains `needle`, and `also`
/// when given.
pub fn pids_matching(needle: &str, also: Option<&str>) -> Vec<u32> {
    processes()
        .into_keys()
        .filter(|pid| {
            let line = cmdline(*pid).join(" ");
            line.contains(needle) && also.is_none_or(|a| line.contains(a))
        })
        .collect()
}

/// `VmRSS` of a process in KiB, from `/proc/<pid>/status`.
pub fn rss_kib(pid: u32) -> Option<u64> {
    status_kib(pid, "VmRSS")
}

/// A field of `/proc/<pid>/status` given in KiB (`VmRSS`, `VmHWM`: the kernel's own peak RSS).
pub fn status_kib(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.strip_prefix(field).is_some_and(|rest| rest.starts_with(':')))?;
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
pub fn processes() -> HashMap<u32, (String, u32)> {
    let Ok(dir) = std::fs::read_dir("/proc") else { return HashMap::new() };
    dir.filter_map(|entry| {
        let pid: u32 = entry.ok()?.file_name().to_str()?.parse().ok()?;
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        Some((pid, parse_stat(&stat)?))
    })
    .collect()
}

/// Processes named `name` that descend from `root`.
pub fn descendants_named(procs: &HashMap<u32, (String, u32)>, root: u32, name: &str) -> Vec<u32> {
    let mut found = descendants(procs, root);
    found.retain(|pid| procs.get(pid).is_some_and(|(n, _)| n == name));
    found
}

/// Processes that descend from `root` (children, grandchildren, …).
pub fn descendants(procs: &HashMap<u32, (String, u32)>, root: u32) -> Vec<u32> {
    let mut found: Vec<u32> = procs
        .iter()
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

/// A process's arguments.
pub fn cmdline(pid: u32) -> Vec<String> {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    raw.split(|b| *b == 0).filter(|a| !a.is_empty()).map(|a| String::from_utf8_lossy(a).into_owned()).collect()
}

/// Whether `pid` is (still) a process named `name`.
pub fn is_named(pid: u32, name: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == name)
}

/// The shared Cassandra's pid, from the pid file `scripts/services` writes:
/// `BG_CASSANDRA_PID_FILE`, else `$BG_STATE_DIR/run/cassandra.pid`, else this
/// checkout's `.state/run/cassandra.pid`.
pub fn cassandra_pid() -> Option<u32> {
    let mut candidates: Vec<std::path::PathBuf> =
        std::env::var_os("BG_CASSANDRA_PID_FILE").map(Into::into).into_iter().collect();
    if let Some(state) = std::env::var_os("BG_STATE_DIR") {
        candidates.push(std::path::PathBuf::from(state).join("run/cassandra.pid"));
    }
    candidates.push(crate::repo_root().join(".state/run/cassandra.pid"));
    candidates.into_iter().find_map(|path| {
        let pid: u32 = std::fs::read_to_string(path).ok()?.trim().parse().ok()?;
        std::path::Path::new(&format!("/proc/{pid}")).exists().then_some(pid)
    })
}

/// A process stopped with SIGSTOP, continued (SIGCONT) when dropped, also while unwinding.
pub struct Paused(pub u32);

impl Paused {
    /// Stops `pid`.
    pub fn pause(pid: u32) -> Paused {
        assert!(signal(pid, "STOP"), "kill -STOP {pid} failed");
        Paused(pid)
    }
}

impl Drop for Paused {
    fn drop(&mut self) {
        signal(self.0, "CONT");
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
    fn this_process_is_found_under_its_parent() {
        let me = std::process::id();
        let procs = processes();
        let (name, parent) = procs.get(&me).cloned().unwrap();
        assert!(descendants_named(&procs, parent, &name).contains(&me));
    }

    #[test]
    fn the_peak_resident_memory_is_at_least_the_current() {
        let me = std::process::id();
        let (rss, peak) = (rss_kib(me).unwrap(), status_kib(me, "VmHWM").unwrap());
        assert!(rss > 0 && peak >= rss, "VmRSS {rss} KiB, VmHWM {peak} KiB");
        assert_eq!(status_kib(me, "VmRS"), None, "a field is matched whole, not by its prefix");
    }
}
