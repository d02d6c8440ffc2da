//! What the harness reads around each run: the origin's Prometheus counters, Cassandra's own
//! coordinator read count (`system_views.coordinator_read_latency`), Redis's own per-command
//! counts (`INFO commandstats`), and the CPU time of every process involved (`/proc/<pid>/stat`).

use std::collections::{BTreeMap, HashMap};

/// Every sample of one `/metrics` scrape, keyed by `name{labels}`.
#[derive(Clone, Debug, Default)]
pub struct Samples(pub HashMap<String, f64>);

impl Samples {
    /// Scrapes `base/metrics`.
    pub async fn scrape(http: &reqwest::Client, base: &str) -> anyhow::Result<Samples> {
        let text = http.get(format!("{base}/metrics")).send().await?.error_for_status()?.text().await?;
        Ok(Samples::parse(&text))
    }

    /// Parses the text exposition format (comments skipped).
    pub fn parse(text: &str) -> Samples {
        Samples(
            text.lines()
                .filter(|l| !l.starts_with('#'))
                .filter_map(|l| {
                    let (name, value) = l.rsplit_once(' ')?;
                    Some((name.to_owned(), value.parse().ok()?))
                })
                .collect(),
        )
    }

    /// A sample's value, 0 when absent.
    pub fn get(&self, sample: &str) -> f64 {
        self.0.get(sample).copied().unwrap_or(0.0)
    }

    /// `self[sample] - before[sample]`.
    pub fn delta(&self, before: &Samples, sample: &str) -> f64 {
        self.get(sample) - before.get(sample)
    }
}

/// Cassandra's coordinator read count for one table, when the virtual table answers.
pub struct CassandraReads {
    session: scylla::client::session::Session,
    keyspace: String,
}

impl CassandraReads {
    /// Connects; `None` (with the reason printed) when Cassandra cannot be asked.
    pub async fn connect(addr: &str, keyspace: &str) -> Option<CassandraReads> {
        let session = scylla::client::session_builder::SessionBuilder::new()
            .known_node(addr)
            .build()
            .await
            .map_err(|e| eprintln!("cassandra cross-check off: {e}"))
            .ok()?;
        let c = CassandraReads { session, keyspace: keyspace.to_owned() };
        c.count().await.map(|_| c)
    }

    /// Reads coordinated for `<keyspace>.keys` since Cassandra started.
    pub async fn count(&self) -> Option<u64> {
        let result = self
            .session
            .query_unpaged(
                "SELECT count FROM system_views.coordinator_read_latency \
                 WHERE keyspace_name = ? AND table_name = ?",
                (self.keyspace.as_str(), "keys"),
            )
            .await
            .map_err(|e| eprintln!("cassandra cross-check: {e}"))
            .ok()?;
        let rows = result.into_rows_result().ok()?;
        let row: Option<(i64,)> = rows.maybe_first_row().ok()?;
        // No row yet = no reads yet.
        Some(row.map_or(0, |(n,)| n as u64))
    }
}

/// Redis's calls and microseconds per command since it started (`INFO commandstats`). Commands
/// a script runs count under their own names too, and the script's time includes theirs.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RedisCommands(pub BTreeMap<String, (u64, u64)>);

impl RedisCommands {
    /// Asks the Redis at `url`; None (with the reason printed) when it cannot be asked.
    pub async fn read(url: &str) -> Option<RedisCommands> {
        let text: Result<String, redis::RedisError> = async {
            let mut c = redis::Client::open(url)?.get_multiplexed_async_connection().await?;
            redis::cmd("INFO").arg("commandstats").query_async(&mut c).await
        }
        .await;
        text.map(|t| RedisCommands::parse(&t)).map_err(|e| eprintln!("redis commandstats: {e}")).ok()
    }

    /// Parses `cmdstat_<name>:calls=N,usec=N,...` lines.
    pub fn parse(text: &str) -> RedisCommands {
        RedisCommands(
            text.lines()
                .filter_map(|l| {
                    let (name, fields) = l.trim().strip_prefix("cmdstat_")?.split_once(':')?;
                    let field = |f: &str| {
                        fields.split(',').find_map(|kv| kv.strip_prefix(f)?.strip_prefix('=')?.parse::<u64>().ok())
                    };
                    Some((name.to_owned(), (field("calls")?, field("usec")?)))
                })
                .collect(),
        )
    }

    /// Calls and microseconds per command since `before`, for the commands that ran (the
    /// `INFO` that reads them left out).
    pub fn since(&self, before: &RedisCommands) -> BTreeMap<String, (u64, u64)> {
        self.0
            .iter()
            .filter(|(name, _)| *name != "info")
            .filter_map(|(name, (calls, usec))| {
                let (c0, u0) = before.0.get(name).copied().unwrap_or_default();
                let d = (calls.saturating_sub(c0), usec.saturating_sub(u0));
                (d.0 > 0).then(|| (name.clone(), d))
            })
            .collect()
    }
}

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

fn cmdline(pid: u32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
        .unwrap_or_default()
}

fn all_pids() -> Vec<u32> {
    std::fs::read_dir("/proc")
        .map(|d| d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok()).collect())
        .unwrap_or_default()
}

/// Processes whose command line contains `needle` (and `also`, when given).
pub fn pids_matching(needle: &str, also: Option<&str>) -> Vec<u32> {
    all_pids()
        .into_iter()
        .filter(|p| {
            let c = cmdline(*p);
            c.contains(needle) && also.is_none_or(|a| c.contains(a))
        })
        .collect()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_samples_with_labels() {
        let s = Samples::parse(
            "# HELP x y\nbloomgate_lookups_total{answered_by=\"filter\"} 12\nbloomgate_database_reads_total 3\n",
        );
        assert_eq!(s.get("bloomgate_lookups_total{answered_by=\"filter\"}"), 12.0);
        assert_eq!(s.get("bloomgate_database_reads_total"), 3.0);
        assert_eq!(s.get("missing"), 0.0);
    }

    #[test]
    fn counts_both_kinds_of_context_switch() {
        let status = "Name:\tx\nvoluntary_ctxt_switches:\t120\nnonvoluntary_ctxt_switches:\t7\n";
        assert_eq!(switches_in_status(status), 127.0);
        let own = context_switches(std::process::id()).expect("this process's threads");
        std::thread::sleep(std::time::Duration::from_millis(5));
        assert!(context_switches(std::process::id()).unwrap() > own, "a sleep is a voluntary switch");
    }

    #[test]
    fn parses_redis_commandstats() {
        let before = RedisCommands::parse("# Commandstats\r\ncmdstat_get:calls=10,usec=30,usec_per_call=3.00\r\n");
        let after = RedisCommands::parse(
            "# Commandstats\r\ncmdstat_get:calls=12,usec=36,usec_per_call=3.00,rejected_calls=0\r\n\
             cmdstat_xinfo|stream:calls=1,usec=30,usec_per_call=30.00\r\ncmdstat_info:calls=3,usec=9\r\n",
        );
        let d = after.since(&before);
        assert_eq!(d.get("get"), Some(&(2, 6)));
        assert_eq!(d.get("xinfo|stream"), Some(&(1, 30)));
        assert_eq!(d.len(), 2, "{d:?}");
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
