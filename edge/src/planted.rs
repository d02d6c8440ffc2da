//! Known bugs, planted on purpose for the history checker's negative controls: a checker that
//! misses one of these is not a checker. Compiled only with the test-only feature
//! `planted-bugs` (never a default feature; a build without debug assertions refuses it, so no
//! release build can carry it), and even then off unless the worker's `PLANTED_BUG` var names
//! one. Without the feature, [`active`] is the constant `false` and every hook compiles away.
//!
//! A hook is one line where the bug lives: `if planted::active(Bug::X) { ... }`.

#[cfg(all(feature = "planted-bugs", not(debug_assertions)))]
compile_error!("the `planted-bugs` feature plants known bugs for tests: it must never be in a release build");

/// The worker var that selects a bug in a `planted-bugs` build.
pub const VAR: &str = "PLANTED_BUG";

/// The bugs that can be planted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bug {
    /// A manifest is used however long ago it was asked for: the edge answers "no" from
    /// segments older than the freshness bound S.
    IgnoreFreshness = 1,
    /// The shared feed's "no" counted from when the follower received its last answer, not
    /// from the end of the chunk it applied last: a copy loaded from a stale cache, or caught
    /// up late, answers "no" for keys written after what it holds.
    FeedFreshnessFromReceipt = 2,
}

impl Bug {
    /// Its name, as `PLANTED_BUG` spells it.
    pub fn name(self) -> &'static str {
        match self {
            Bug::IgnoreFreshness => "ignore-freshness",
            Bug::FeedFreshnessFromReceipt => "feed-freshness-from-receipt",
        }
    }

    /// The bug named `name`, if any.
    pub fn named(name: &str) -> Option<Bug> {
        [Bug::IgnoreFreshness, Bug::FeedFreshnessFromReceipt].into_iter().find(|b| b.name() == name.trim())
    }
}

/// The bug selected in this isolate (0: none).
#[cfg(feature = "planted-bugs")]
static SELECTED: core::sync::atomic::AtomicU8 = core::sync::atomic::AtomicU8::new(0);

/// Selects the bug `PLANTED_BUG` names (the worker reads its vars on every request).
pub fn select(name: Option<&str>) {
    #[cfg(feature = "planted-bugs")]
    SELECTED.store(name.and_then(Bug::named).map_or(0, |b| b as u8), core::sync::atomic::Ordering::Relaxed);
    #[cfg(not(feature = "planted-bugs"))]
    let _ = name;
}

/// Whether `bug` is planted in this isolate.
#[inline(always)]
pub fn active(bug: Bug) -> bool {
    #[cfg(feature = "planted-bugs")]
    {
        SELECTED.load(core::sync::atomic::Ordering::Relaxed) == bug as u8
    }
    #[cfg(not(feature = "planted-bugs"))]
    {
        let _ = bug;
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bugs_are_named_and_off_unless_built_and_selected() {
        assert_eq!(Bug::named("ignore-freshness"), Some(Bug::IgnoreFreshness));
        assert_eq!(Bug::named("skip-everything"), None);
        if !cfg!(feature = "planted-bugs") {
            select(Some("ignore-freshness"));
            assert!(!active(Bug::IgnoreFreshness), "a build without the feature plants nothing");
        }
    }
}
