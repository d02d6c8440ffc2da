//! The memory this process may use: `memory_budget_bytes` if set, its cgroup's limit (v2
//! `memory.max`, or v1 `memory.limit_in_bytes`), the machine's memory, whichever is least. A
//! budget the cgroup does not allow would get the process killed before any cap is reached, so
//! the setting can lower the limit, never raise it.
//!
//! The cgroup is the process's own, found in `/proc/self/cgroup`; its limit is the least of
//! every level from it up to the hierarchy's root that exists here: a container without its
//! own cgroup namespace sees its host-side path, but only the levels mounted in it, and a limit
//! set on a parent (a pod's, around its containers) binds as well.

use std::fmt;
use std::path::{Path, PathBuf};

/// Limits at or above this are "no limit": cgroup v1 writes unlimited as the largest page
/// count in bytes (9223372036854771712), and no machine has 2^60 bytes.
const UNLIMITED: u64 = 1 << 60;

/// Where the budget came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// `memory_budget_bytes`.
    Setting,
    /// A cgroup v2 `memory.max` (the file).
    CgroupV2(PathBuf),
    /// A cgroup v1 `memory.limit_in_bytes` (the file).
    CgroupV1(PathBuf),
    /// No limit anywhere: the machine's memory (`MemTotal`).
    Machine,
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Setting => f.write_str("memory_budget_bytes"),
            Source::CgroupV2(path) | Source::CgroupV1(path) => write!(f, "{}", path.display()),
            Source::Machine => f.write_str("the machine's memory (no cgroup limit)"),
        }
    }
}

/// The memory budget and where it came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemoryLimit {
    /// The limit, in bytes.
    pub bytes: u64,
    /// The least of the limits found.
    pub source: Source,
}

impl MemoryLimit {
    /// The budget of this process: `setting` (0 = none) against its cgroup and the machine.
    pub fn of_this_process(setting: u64) -> MemoryLimit {
        MemoryLimit::under(Path::new("/"), setting)
    }

    /// The same, reading `proc/` and `sys/fs/cgroup/` under `root` (tests give a tree of their
    /// own).
    pub fn under(root: &Path, setting: u64) -> MemoryLimit {
        let membership = std::fs::read_to_string(root.join("proc/self/cgroup")).unwrap_or_default();
        let mut candidates: Vec<MemoryLimit> = cgroup_limits(root, &membership);
        if let Some(bytes) = machine_memory(root) {
            candidates.push(MemoryLimit { bytes, source: Source::Machine });
        }
        if setting > 0 {
            candidates.push(MemoryLimit { bytes: setting, source: Source::Setting });
        }
        // Ties go to the one listed last: a setting equal to the cgroup's limit is the setting.
        candidates
            .into_iter()
            .rev()
            .min_by_key(|l| l.bytes)
            .unwrap_or(MemoryLimit { bytes: setting, source: Source::Setting })
    }
}

/// Every limit set on the process's cgroups, v2 and v1, from its own level up.
fn cgroup_limits(root: &Path, membership: &str) -> Vec<MemoryLimit> {
    let mut limits = Vec::new();
    for line in membership.lines() {
        // `hierarchy-id:controllers:path`; v2 is `0::path`.
        let mut fields = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) = (fields.next(), fields.next(), fields.next()) else {
            continue;
        };
        let (mount, file, v2) = if controllers.is_empty() {
            (root.join("sys/fs/cgroup"), "memory.max", true)
        } else if controllers.split(',').any(|c| c == "memory") {
            (root.join("sys/fs/cgroup/memory"), "memory.limit_in_bytes", false)
        } else {
            continue;
        };
        for level in levels(path) {
            let at = mount.join(level).join(file);
            let Some(bytes) = std::fs::read_to_string(&at).ok().and_then(|text| parse_limit(&text)) else {
                continue;
            };
            let source = if v2 { Source::CgroupV2(at) } else { Source::CgroupV1(at) };
            limits.push(MemoryLimit { bytes, source });
        }
    }
    limits
}

/// `a/b/c`, `a/b`, `a`, and the root (`""`), for the path `/a/b/c`.
fn levels(path: &str) -> Vec<String> {
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    (0..=parts.len()).rev().map(|n| parts[..n].join("/")).collect()
}

/// A limit file's value: bytes, or None for `max` and for v1's "unlimited".
fn parse_limit(text: &str) -> Option<u64> {
    let bytes: u64 = text.trim().parse().ok()?;
    (bytes < UNLIMITED).then_some(bytes)
}

/// `MemTotal` from `/proc/meminfo`, in bytes.
fn machine_memory(root: &Path) -> Option<u64> {
    let meminfo = std::fs::read_to_string(root.join("proc/meminfo")).ok()?;
    let line = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fake `/` with the given files.
    fn tree(files: &[(&str, &str)]) -> PathBuf {
        let root = std::env::temp_dir().join(format!("bloomgate-budget-{:016x}", rand::random::<u64>()));
        for (path, text) in files {
            let at = root.join(path);
            std::fs::create_dir_all(at.parent().unwrap()).unwrap();
            std::fs::write(at, text).unwrap();
        }
        root
    }

    const MEMINFO: (&str, &str) = ("proc/meminfo", "MemTotal:       24683784 kB\nMemFree: 1 kB\n");
    const MACHINE: u64 = 24683784 * 1024;

    #[test]
    fn cgroup_v2_memory_max_binds_and_max_means_none() {
        let root = tree(&[
            MEMINFO,
            ("proc/self/cgroup", "0::/kubepods/pod1/c1\n"),
            ("sys/fs/cgroup/kubepods/pod1/c1/memory.max", "1073741824\n"),
            ("sys/fs/cgroup/kubepods/pod1/memory.max", "2147483648\n"),
            ("sys/fs/cgroup/kubepods/memory.max", "max\n"),
        ]);
        let limit = MemoryLimit::under(&root, 0);
        assert_eq!(limit.bytes, 1 << 30);
        assert_eq!(limit.source, Source::CgroupV2(root.join("sys/fs/cgroup/kubepods/pod1/c1/memory.max")));
        assert_eq!(MemoryLimit::under(&root, 512 << 20), MemoryLimit { bytes: 512 << 20, source: Source::Setting });
        assert_eq!(
            MemoryLimit::under(&root, 4 << 30).bytes,
            1 << 30,
            "a setting above the cgroup's limit is not allowed"
        );

        let unlimited = tree(&[MEMINFO, ("proc/self/cgroup", "0::/\n"), ("sys/fs/cgroup/memory.max", "max\n")]);
        assert_eq!(MemoryLimit::under(&unlimited, 0), MemoryLimit { bytes: MACHINE, source: Source::Machine });
    }

    #[test]
    fn a_parent_s_limit_binds_and_levels_not_mounted_here_are_skipped() {
        // A container without its own cgroup namespace: its host-side path is not mounted, the
        // root of the mount is its own cgroup.
        let root = tree(&[
            MEMINFO,
            ("proc/self/cgroup", "0::/system.slice/docker-abc.scope\n"),
            ("sys/fs/cgroup/memory.max", "805306368\n"),
        ]);
        assert_eq!(MemoryLimit::under(&root, 0).bytes, 768 << 20);
        let nested = tree(&[
            MEMINFO,
            ("proc/self/cgroup", "0::/a/b\n"),
            ("sys/fs/cgroup/a/b/memory.max", "max\n"),
            ("sys/fs/cgroup/a/memory.max", "268435456\n"),
        ]);
        assert_eq!(MemoryLimit::under(&nested, 0).bytes, 256 << 20);
    }

    #[test]
    fn cgroup_v1_limit_in_bytes_binds_and_its_unlimited_means_none() {
        let root = tree(&[
            MEMINFO,
            ("proc/self/cgroup", "12:pids:/x\n4:memory:/process/abc\n1:name=systemd:/\n0::/\n"),
            ("sys/fs/cgroup/memory/process/abc/memory.limit_in_bytes", "536870912\n"),
            ("sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n"),
        ]);
        let limit = MemoryLimit::under(&root, 0);
        assert_eq!(limit.bytes, 512 << 20);
        assert!(matches!(limit.source, Source::CgroupV1(_)), "{limit:?}");
        let unlimited = tree(&[
            MEMINFO,
            ("proc/self/cgroup", "4:memory,cpu:/\n"),
            ("sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n"),
        ]);
        assert_eq!(MemoryLimit::under(&unlimited, 0).source, Source::Machine);
    }

    #[test]
    fn a_limit_above_the_machine_is_the_machine_and_nothing_readable_leaves_the_setting() {
        let root = tree(&[MEMINFO, ("proc/self/cgroup", "0::/\n"), ("sys/fs/cgroup/memory.max", "99999999999999\n")]);
        assert_eq!(MemoryLimit::under(&root, 0), MemoryLimit { bytes: MACHINE, source: Source::Machine });
        let empty = tree(&[]);
        assert_eq!(MemoryLimit::under(&empty, 7 << 20), MemoryLimit { bytes: 7 << 20, source: Source::Setting });
        assert_eq!(MemoryLimit::under(&empty, 0).bytes, 0, "nothing known: the caps refuse to start");
    }

    #[test]
    fn this_machine_s_own_limit_is_found() {
        // Whatever this machine is (a cgroup v1 or v2 host, a container), the budget is at most
        // its memory and more than nothing.
        let limit = MemoryLimit::of_this_process(0);
        let machine = machine_memory(Path::new("/")).expect("/proc/meminfo");
        assert!(limit.bytes > 0 && limit.bytes <= machine, "{limit:?}");
    }
}
