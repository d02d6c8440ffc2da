//! A memory cgroup of the run's own, for the origin under a burst: created with a limit, the
//! origin placed in it before it execs (so everything it ever allocates counts), its peak usage
//! and the OOM kills in it read back, removed when dropped. cgroup v2 where the root delegates
//! the memory controller, else v1's memory hierarchy; machines with neither (or no right to
//! write them) get an error that says so, and the run falls back to `memory_budget_bytes`.

use anyhow::Context as _;
use std::path::{Path, PathBuf};

/// Which cgroup interface holds the limit.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Version {
    /// `memory.max`, `memory.peak`, `memory.events`.
    V2,
    /// `memory.limit_in_bytes`, `memory.max_usage_in_bytes`, `memory.oom_control`.
    V1,
}

/// A cgroup with a memory limit; dropped = removed (once it has no processes).
pub struct MemoryCgroup {
    dir: PathBuf,
    version: Version,
    /// The limit written, in bytes.
    pub limit: u64,
}

impl MemoryCgroup {
    /// Creates `bloomgate-burst-<pid>` with `limit` bytes of memory (no swap: the machine's
    /// swap, if any, would hide the limit).
    pub fn create(limit: u64) -> anyhow::Result<MemoryCgroup> {
        let name = format!("bloomgate-burst-{}", std::process::id());
        let v2_root = Path::new("/sys/fs/cgroup");
        let v2 = std::fs::read_to_string(v2_root.join("cgroup.subtree_control"))
            .is_ok_and(|controllers| controllers.split_whitespace().any(|c| c == "memory"));
        let (dir, version) =
            if v2 { (v2_root.join(&name), Version::V2) } else { (v2_root.join("memory").join(&name), Version::V1) };
        std::fs::create_dir(&dir).with_context(|| {
            format!("create the cgroup {} (needs root and a writable memory cgroup)", dir.display())
        })?;
        let cgroup = MemoryCgroup { dir, version, limit };
        match version {
            Version::V2 => {
                cgroup.write("memory.max", limit)?;
                cgroup.write("memory.swap.max", 0).ok();
            }
            Version::V1 => {
                cgroup.write("memory.limit_in_bytes", limit)?;
                cgroup.write("memory.swappiness", 0).ok();
            }
        }
        Ok(cgroup)
    }

    /// Its `cgroup.procs`: writing a pid there moves that process in.
    pub fn procs(&self) -> PathBuf {
        self.dir.join("cgroup.procs")
    }

    /// The interface in use.
    pub fn version(&self) -> Version {
        self.version
    }

    /// The most memory its processes have been charged at once (RSS, page cache and kernel
    /// memory they caused), in bytes.
    pub fn peak_bytes(&self) -> anyhow::Result<u64> {
        let file = match self.version {
            Version::V2 => "memory.peak",
            Version::V1 => "memory.max_usage_in_bytes",
        };
        self.read(file)?.trim().parse().with_context(|| format!("parse {file}"))
    }

    /// Processes the kernel killed in it for want of memory.
    pub fn oom_kills(&self) -> anyhow::Result<u64> {
        let file = match self.version {
            Version::V2 => "memory.events",
            Version::V1 => "memory.oom_control",
        };
        // Kernels before 4.13 have no `oom_kill` line in v1: none counted is none seen.
        Ok(field(&self.read(file)?, "oom_kill").unwrap_or(0))
    }

    fn write(&self, file: &str, value: u64) -> anyhow::Result<()> {
        let path = self.dir.join(file);
        std::fs::write(&path, value.to_string()).with_context(|| format!("write {value} to {}", path.display()))
    }

    fn read(&self, file: &str) -> anyhow::Result<String> {
        let path = self.dir.join(file);
        std::fs::read_to_string(&path).with_context(|| format!("read {}", path.display()))
    }
}

impl Drop for MemoryCgroup {
    fn drop(&mut self) {
        // A cgroup goes only once its processes have: the origin is stopped before this.
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// The value of `name` in a flat keyed file (`name value` lines).
fn field(text: &str, name: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let (key, value) = line.split_once(' ')?;
        (key == name).then(|| value.trim().parse().ok()).flatten()
    })
}

#[cfg(test)]
mod tests {
    use super::field;

    #[test]
    fn oom_kills_are_read_from_either_interface() {
        let v1 = "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n";
        let v2 = "low 0\nhigh 0\nmax 12\noom 2\noom_kill 1\noom_group_kill 0\n";
        assert_eq!(field(v1, "oom_kill"), Some(3));
        assert_eq!(field(v2, "oom_kill"), Some(1));
        assert_eq!(field("oom_kill_disable 0\nunder_oom 0\n", "oom_kill"), None, "an older kernel's v1");
    }
}
