//! CPU time around each run, from `/proc`: per process (`/proc/<pid>/stat`), per named group of
//! processes, and the whole machine's (`/proc/stat`), so that what others on this shared machine
//! used shows as the difference; and waiting for them to go quiet.

use bloomgate_tests::procs::pids_matching;
use std::collections::BTreeMap;

/// User + system CPU seconds of a process (all its threads), from `/proc/<pid>/stat`.
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the parenthesised command name, which may itself hold spaces.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split(' ').collect();
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
    let ticks: f64 = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    // USER_HZ is 100 on every Linux the harness runs on.
    Some(ticks / 100.0)
}

/// Context switches of every thread of `pid` so far, voluntary (it waited) and involuntary (it
/// was preempted), from `/proc/<pid>/task/*/status`; threads that exited are not counted.
pub fn context_switches(pid: u32) -> Option<f64> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    let switches = tasks
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("status")).ok())
        .map(|status| switches_in_status(&status))
        .sum();
    Some(switches)
}

/// The voluntary and involuntary context switches a `/proc/.../status` text reports.
fn switches_in_status(status: &str) -> f64 {
    status
        .lines()
        .filter_map(|line| {
            let (name, value) = line.split_once(':')?;
            matches!(name, "voluntary_ctxt_switches" | "nonvoluntary_ctxt_switches")
                .then(|| value.trim().parse::<f64>().ok())?
        })
        .sum()
}

/// CPU seconds the hypervisor gave other guests while this machine's CPUs wanted to run, summed
/// over its CPUs since boot (`steal` in `/proc/stat`): how contended the host was.
pub fn machine_steal_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let cpu = stat.lines().next()?.strip_prefix("cpu ")?;
    let steal: f64 = cpu.split_whitespace().nth(7)?.parse().ok()?;
    Some(steal / 100.0)
}

/// Busy CPU seconds of the whole machine since boot (user, nice, system, irq, softirq, steal
/// over all CPUs), from `/proc/stat`: what others on the machine used shows as the difference.
pub fn machine_busy_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let cpu = stat.lines().next()?.strip_prefix("cpu ")?;
    let f: Vec<f64> = cpu.split_whitespace().filter_map(|v| v.parse().ok()).collect();
    // user nice system idle iowait irq softirq steal
    let busy = f.first()? + f.get(1)? + f.get(2)? + f.get(5)? + f.get(6)? + f.get(7).unwrap_or(&0.0);
    Some(busy / 100.0)
}

/// Descendants of `ancestor` (children, grandchildren, …).
pub fn descendants(ancestor: u32) -> Vec<u32> {
    bloomgate_tests::procs::descendants(&bloomgate_tests::procs::processes(), ancestor)
}

/// A named group of processes whose CPU time is summed.
#[derive(Clone, Debug)]
pub struct CpuGroup {
    /// Label in reports (`origin`, `redis`, `cassandra`, `edge`, `loadgen`, `floor`).
    pub name: String,
    /// Its processes.
    pub pids: Vec<u32>,
}

impl CpuGroup {
    /// Summed CPU seconds now (vanished processes count 0).
    pub fn seconds(&self) -> f64 {
        self.pids.iter().filter_map(|p| cpu_seconds(*p)).sum()
    }

    /// Summed context switches of its processes' threads so far.
    pub fn context_switches(&self) -> f64 {
        self.pids.iter().filter_map(|p| context_switches(*p)).sum()
    }
}

/// Cores the machine spends outside `groups`' processes, over `window`.
pub async fn others_busy(groups: &[CpuGroup], window: std::time::Duration) -> f64 {
    let mine = |g: &[CpuGroup]| g.iter().map(CpuGroup::seconds).sum::<f64>();
    let (m0, g0) = (machine_busy_seconds().unwrap_or(0.0), mine(groups));
    tokio::time::sleep(window).await;
    let (m1, g1) = (machine_busy_seconds().unwrap_or(0.0), mine(groups));
    ((m1 - m0) - (g1 - g0)).max(0.0) / window.as_secs_f64()
}

/// Waits up to `max` for the processes outside `groups` to use under half a core; the last
/// reading, in cores.
pub async fn wait_quiet(groups: &[CpuGroup], max: std::time::Duration) -> f64 {
    let deadline = std::time::Instant::now() + max;
    loop {
        let others = others_busy(groups, std::time::Duration::from_secs(1)).await;
        if others < 0.5 || std::time::Instant::now() >= deadline {
            return others;
        }
    }
}

/// The groups every origin runs on: the Redis at `redis_url` (by its port), Cassandra, and this
/// process (the load generator).
pub fn service_groups(redis_url: &str) -> Vec<CpuGroup> {
    let redis_port = redis_url.trim_end_matches('/').rsplit(':').next().unwrap_or("6379");
    vec![
        CpuGroup { name: "redis".into(), pids: pids_matching("redis-server", Some(&format!(":{redis_port}"))) },
        CpuGroup { name: "cassandra".into(), pids: pids_matching("CassandraDaemon", None) },
        CpuGroup { name: "loadgen".into(), pids: vec![std::process::id()] },
    ]
}

/// A reading of every group's CPU seconds and the machine's busy seconds.
pub struct CpuReading {
    groups: Vec<f64>,
    machine: f64,
}

impl CpuReading {
    /// Reads `groups` and the machine now.
    pub fn now(groups: &[CpuGroup]) -> CpuReading {
        CpuReading {
            groups: groups.iter().map(CpuGroup::seconds).collect(),
            machine: machine_busy_seconds().unwrap_or(0.0),
        }
    }

    /// CPU seconds per group since `before` (the same `groups`), and everything else on the
    /// machine (other people's builds and tests share these cores) as [`OTHERS`].
    pub fn since(&self, before: &CpuReading, groups: &[CpuGroup]) -> BTreeMap<String, f64> {
        let mut out = BTreeMap::new();
        let mut mine = 0.0;
        for (i, g) in groups.iter().enumerate() {
            let secs = (self.groups[i] - before.groups[i]).max(0.0);
            mine += secs;
            out.insert(g.name.clone(), secs);
        }
        out.insert(OTHERS.into(), ((self.machine - before.machine) - mine).max(0.0));
        out
    }
}

/// The name under which [`CpuReading::since`] reports the rest of the machine (sorted last).
pub const OTHERS: &str = "zz-others";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_both_kinds_of_context_switch() {
        let status = "Name:\tx\nvoluntary_ctxt_switches:\t120\nnonvoluntary_ctxt_switches:\t7\n";
        assert_eq!(switches_in_status(status), 127.0);
        let own = context_switches(std::process::id()).expect("this process's threads");
        std::thread::sleep(std::time::Duration::from_millis(5));
        assert!(context_switches(std::process::id()).unwrap() > own, "a sleep is a voluntary switch");
    }

    #[test]
    fn reads_own_cpu_time() {
        let mut x = 0u64;
        for i in 0..10_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        assert!(x != 1);
        assert!(cpu_seconds(std::process::id()).is_some());
    }
}
