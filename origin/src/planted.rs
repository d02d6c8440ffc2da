//! Known bugs, planted on purpose for the history checker's negative controls: a checker that
//! misses one of these is not a checker. Compiled only with the test-only feature
//! `planted-bugs` (never a default feature; a build without debug assertions refuses it, so no
//! release build can carry it), and even then off unless `BG_PLANTED_BUG` names one.
//! Without the feature, [`active`] is the constant `false` and every hook compiles away.
//!
//! A hook is one line where the bug lives: `if planted::active(Bug::X) { ... }`.

#[cfg(all(feature = "planted-bugs", not(debug_assertions)))]
compile_error!("the `planted-bugs` feature plants known bugs for tests: it must never be in a release build");

/// The environment variable that selects a bug in a `planted-bugs` build.
pub const VAR: &str = "BG_PLANTED_BUG";

/// The bugs that can be planted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bug {
    /// A local copy answers without waiting for the read barrier (a catch-up round that
    /// started after the lookup arrived).
    SkipReadBarrier,
    /// A write is acknowledged without adding its keys to the filter.
    SkipFilterAdd,
    /// Every Redis process reads as the same incarnation: a restarted or rolled-back Redis is
    /// never noticed.
    SkipIncarnationCheck,
    /// A write is acknowledged without waiting out the read leases of the generations it added
    /// to: another origin's copy may then answer "no" for it from a lease older than the add.
    SkipLeaseWait,
    /// A delete is stamped the skew margin *behind* its origin's clock and acknowledged at once,
    /// with no commit wait: a write made less than the margin before it outranks it, so the
    /// delete answers `"deleted": true` and removes nothing.
    DeleteStampedBehind,
    /// A recovery from a checkpoint loads its segments but never replays the writes logged
    /// since: the keys acknowledged after the checkpoint are missing from the new generation.
    SkipReplay,
}

impl Bug {
    /// Every bug.
    pub const ALL: [Bug; 6] = [
        Bug::SkipReadBarrier,
        Bug::SkipFilterAdd,
        Bug::SkipIncarnationCheck,
        Bug::SkipLeaseWait,
        Bug::DeleteStampedBehind,
        Bug::SkipReplay,
    ];

    /// Its name, as `BG_PLANTED_BUG` spells it.
    pub fn name(self) -> &'static str {
        match self {
            Bug::SkipReadBarrier => "skip-read-barrier",
            Bug::SkipFilterAdd => "skip-filter-add",
            Bug::SkipIncarnationCheck => "skip-incarnation-check",
            Bug::SkipLeaseWait => "skip-lease-wait",
            Bug::DeleteStampedBehind => "delete-stamped-behind",
            Bug::SkipReplay => "skip-replay",
        }
    }

    /// The bug named `name`, if any.
    pub fn named(name: &str) -> Option<Bug> {
        Bug::ALL.into_iter().find(|b| b.name() == name.trim())
    }
}

/// Whether `bug` is planted in this process.
#[inline(always)]
pub fn active(bug: Bug) -> bool {
    #[cfg(feature = "planted-bugs")]
    {
        selected() == Some(bug)
    }
    #[cfg(not(feature = "planted-bugs"))]
    {
        let _ = bug;
        false
    }
}

/// The bug `BG_PLANTED_BUG` names, read once (and said loudly in the log).
#[cfg(feature = "planted-bugs")]
fn selected() -> Option<Bug> {
    static SELECTED: std::sync::OnceLock<Option<Bug>> = std::sync::OnceLock::new();
    *SELECTED.get_or_init(|| {
        let name = std::env::var(VAR).ok()?;
        let bug = Bug::named(&name);
        match bug {
            Some(bug) => tracing::warn!(bug = bug.name(), "PLANTED BUG ACTIVE: this origin is wrong on purpose"),
            None => {
                tracing::info!(name, "{VAR} names no bug of the origin's (the edge's, perhaps); none is active here")
            }
        }
        bug
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bugs_are_named_and_off_unless_built_and_selected() {
        for bug in Bug::ALL {
            assert_eq!(Bug::named(bug.name()), Some(bug));
        }
        assert_eq!(Bug::named("skip-everything"), None);
        if !cfg!(feature = "planted-bugs") {
            assert!(Bug::ALL.iter().all(|b| !active(*b)), "a build without the feature plants nothing");
        }
    }
}
