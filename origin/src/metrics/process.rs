//! The process's own metrics under their standard names (`process_resident_memory_bytes`,
//! `process_cpu_seconds_total`, `process_open_fds`, `process_max_fds`, `process_threads`,
//! `process_start_time_seconds`), as every Prometheus client library exports them, read from
//! `/proc/self` at each scrape. Without the `bloomgate_` prefix: dashboards and alerts written
//! for any process work on the origin's.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use std::path::{Path, PathBuf};

/// The units `/proc/<pid>/stat` counts in: clock ticks (the kernel's `USER_HZ`) and memory pages,
/// which differ between machines (aarch64 kernels built with 16 or 64 KiB pages).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StatUnits {
    /// Clock ticks per second.
    pub ticks_per_second: f64,
    /// Bytes of a memory page.
    pub page_bytes: u64,
}

impl StatUnits {
    /// This machine's, as the kernel tells the process at start (the auxiliary vector).
    #[cfg(target_os = "linux")]
    pub fn of_this_machine() -> StatUnits {
        StatUnits {
            ticks_per_second: rustix::param::clock_ticks_per_second() as f64,
            page_bytes: rustix::param::page_size() as u64,
        }
    }

    /// Elsewhere there is no `/proc` to read: the common values stand in.
    #[cfg(not(target_os = "linux"))]
    pub fn of_this_machine() -> StatUnits {
        StatUnits { ticks_per_second: 100.0, page_bytes: 4096 }
    }
}

/// What `/proc/<pid>/stat`, `/proc/stat`, `/proc/<pid>/fd` and `/proc/<pid>/limits` say.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ProcessSample {
    /// Resident memory, bytes.
    pub resident_bytes: u64,
    /// User and system CPU time, seconds.
    pub cpu_seconds: f64,
    /// Threads the process runs now.
    pub threads: u64,
    /// Start time, seconds since the Unix epoch.
    pub start_time_seconds: f64,
    /// Open file descriptors.
    pub open_fds: u64,
    /// The soft limit on open file descriptors (`u64::MAX` when unlimited).
    pub max_fds: u64,
}

impl ProcessSample {
    /// This process, now; None where `/proc` cannot be read (not Linux).
    pub fn of_this_process() -> Option<ProcessSample> {
        ProcessSample::read(Path::new("/proc"), "self")
    }

    /// Process `pid` (`self` for this one) under `proc`.
    pub fn read(proc: &Path, pid: &str) -> Option<ProcessSample> {
        let dir: PathBuf = proc.join(pid);
        let stat = std::fs::read_to_string(dir.join("stat")).ok()?;
        let boot_time = boot_time(&std::fs::read_to_string(proc.join("stat")).ok()?)?;
        let mut sample = parse_stat(&stat, boot_time, StatUnits::of_this_machine())?;
        sample.open_fds = std::fs::read_dir(dir.join("fd")).map_or(0, |d| d.count() as u64);
        sample.max_fds = std::fs::read_to_string(dir.join("limits")).ok().and_then(|l| max_open_files(&l)).unwrap_or(0);
        Some(sample)
    }
}

/// The fields of `/proc/<pid>/stat` (`pid (comm) state ppid …`; the name may hold spaces and
/// parentheses, so fields are counted from the last `)`): utime 14, stime 15, num_threads 20,
/// starttime 22 (ticks after boot), rss 24 (pages), in `units`.
fn parse_stat(stat: &str, boot_time: u64, units: StatUnits) -> Option<ProcessSample> {
    let after_name = stat.get(stat.rfind(')')? + 1..)?;
    // Fields from 3 (state) on.
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let field = |n: usize| -> Option<u64> { fields.get(n - 3)?.parse().ok() };
    Some(ProcessSample {
        cpu_seconds: (field(14)? + field(15)?) as f64 / units.ticks_per_second,
        threads: field(20)?,
        start_time_seconds: boot_time as f64 + field(22)? as f64 / units.ticks_per_second,
        resident_bytes: field(24)? * units.page_bytes,
        ..ProcessSample::default()
    })
}

/// `btime` of `/proc/stat`: the boot time, seconds since the Unix epoch.
fn boot_time(proc_stat: &str) -> Option<u64> {
    proc_stat.lines().find_map(|l| l.strip_prefix("btime")?.trim().parse().ok())
}

/// The soft limit of `Max open files` in `/proc/<pid>/limits`.
fn max_open_files(limits: &str) -> Option<u64> {
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    match line.strip_prefix("Max open files")?.split_whitespace().next()? {
        "unlimited" => Some(u64::MAX),
        soft => soft.parse().ok(),
    }
}

/// The collector, read at each scrape.
#[derive(Debug, Default)]
pub struct ProcessCollector;

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Some(s) = ProcessSample::of_this_process() else { return Ok(()) };
        let cpu = ConstCounter::new(s.cpu_seconds);
        cpu.encode(encoder.encode_descriptor(
            "process_cpu_seconds",
            "Total user and system CPU time spent in seconds.",
            None,
            cpu.metric_type(),
        )?)?;
        let gauges: [(&str, &str, f64); 5] = [
            ("process_resident_memory_bytes", "Resident memory size in bytes.", s.resident_bytes as f64),
            ("process_open_fds", "Number of open file descriptors.", s.open_fds as f64),
            ("process_max_fds", "Maximum number of open file descriptors.", s.max_fds as f64),
            ("process_threads", "Number of OS threads in the process.", s.threads as f64),
            (
                "process_start_time_seconds",
                "Start time of the process since unix epoch in seconds.",
                s.start_time_seconds,
            ),
        ];
        for (name, help, value) in gauges {
            let gauge = ConstGauge::new(value);
            gauge.encode(encoder.encode_descriptor(name, help, None, gauge.metric_type())?)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_are_read_from_the_last_parenthesis() {
        let stat = "4242 (a (b) c) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 130 0 0 20 0 7 0 1066284 3133440 394 18446744073709551615";
        let x86 = StatUnits { ticks_per_second: 100.0, page_bytes: 4096 };
        let s = parse_stat(stat, 1_796_420_689, x86).unwrap();
        assert_eq!(s.cpu_seconds, 3.8);
        assert_eq!(s.threads, 7);
        assert_eq!(s.start_time_seconds, 1_796_420_689.0 + 10_662.84);
        assert_eq!(s.resident_bytes, 394 * 4096);
        // An aarch64 kernel with 16 KiB pages and another tick rate counts the same pages bigger.
        let arm = StatUnits { ticks_per_second: 250.0, page_bytes: 16_384 };
        let s = parse_stat(stat, 1_796_420_689, arm).unwrap();
        assert_eq!((s.resident_bytes, s.cpu_seconds), (394 * 16_384, 1.52));
        assert_eq!(parse_stat("garbage", 0, x86), None);
        assert_eq!(boot_time("cpu  1 2 3\nbtime 1796420689\nprocesses 9\n"), Some(1_796_420_689));
        let limits = "Limit                     Soft Limit           Hard Limit           Units\nMax open files            20000                524288               files\n";
        assert_eq!(max_open_files(limits), Some(20_000));
        assert_eq!(max_open_files("Max open files  unlimited  unlimited  files\n"), Some(u64::MAX));
    }

    #[test]
    fn this_machines_units_are_the_kernels() {
        let units = StatUnits::of_this_machine();
        assert!(units.page_bytes.is_power_of_two() && units.page_bytes >= 4096, "{units:?}");
        assert!(units.ticks_per_second >= 100.0, "{units:?}");
    }

    #[test]
    fn this_process_is_read_and_its_figures_move() {
        let before = ProcessSample::of_this_process().expect("/proc/self");
        let held = vec![1u8; 64 << 20];
        let file = std::fs::File::open("/proc/self/stat").unwrap();
        let after = ProcessSample::of_this_process().unwrap();
        assert!(after.resident_bytes >= before.resident_bytes + (48 << 20), "{before:?} -> {after:?}");
        assert!(after.open_fds > before.open_fds || after.open_fds > 2, "{after:?}");
        assert!(after.max_fds >= after.open_fds && after.threads >= 1, "{after:?}");
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
        assert!(
            after.start_time_seconds > now - 86_400.0 * 365.0 && after.start_time_seconds <= now + 1.0,
            "{after:?}"
        );
        assert!(after.cpu_seconds >= before.cpu_seconds);
        drop((held, file));
    }
}
