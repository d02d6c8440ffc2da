//! The decision, pure: what a filter's health calls for (a rebuild for lost bits, a resize, a
//! rebuild for drift, or only retiring an overdue replaced generation), from the facts
//! `health` gathered and the configured thresholds.

use crate::config::Config;

/// When to rebuild on its own.
#[derive(Clone, Copy, Debug)]
pub struct Thresholds {
    /// Resize (double capacity) when estimated keys exceed capacity × this.
    pub resize_at_fill: f64,
    /// Rebuild when the observed false-positive rate exceeds the target × this...
    pub fp_factor: f64,
    /// ...over at least this many distinct absent keys looked up.
    pub fp_min_samples: u64,
    /// Rebuild when keys deleted since the build exceed this share of the estimated keys.
    pub stale_delete_share: f64,
    /// A `previous` generation older than this is retired by any origin (its own rebuild
    /// should have retired it; it died).
    pub retire_previous_after_ms: u64,
    /// A rebuild for drift (false positives, deleted keys) only once the active generation is
    /// this old: at most one per interval, however the drift was brought about.
    pub drift_rebuild_min_interval_ms: u64,
}

impl Thresholds {
    /// The thresholds the configuration sets.
    pub fn from_config(config: &Config) -> Thresholds {
        Thresholds {
            resize_at_fill: config.auto_resize_at_fill,
            fp_factor: config.auto_fp_factor,
            fp_min_samples: config.auto_fp_min_samples,
            stale_delete_share: config.auto_stale_delete_share,
            // Its own rebuild retires `previous` after the grace period; one that is still
            // named well after that (grace twice over, plus a lease expiry) was orphaned.
            retire_previous_after_ms: 2 * config.rebuild_grace_ms + config.rebuild_lease_ms,
            drift_rebuild_min_interval_ms: config.auto_rebuild_min_interval_ms,
        }
    }
}

/// What the check saw for one filter.
#[derive(Clone, Copy, Debug, Default)]
pub struct Health {
    /// The filter store has no record of the filter (flushed, restarted empty).
    pub meta_missing: bool,
    /// A segment of the active generation is missing or short (evicted, deleted).
    pub segment_missing: bool,
    /// The active generation's bits belong to another Redis incarnation (restarted from a
    /// snapshot, failed over): they may have lost acknowledged adds.
    pub incarnation_changed: bool,
    /// A rebuild is running somewhere (its lease is held).
    pub building: bool,
    /// The filter is being dropped (its state is a tombstone): nothing to recover.
    pub dropped: bool,
    /// A generation is named `building` but no rebuild holds the lease: its rebuild died.
    pub building_abandoned: bool,
    /// Milliseconds since `previous` was replaced, if there is one.
    pub previous_age_ms: Option<u64>,
    /// A filter of twice the capacity is within the size limits (see `sizing`).
    pub doubled_fits: bool,
    /// Configured capacity.
    pub capacity: u64,
    /// Target false-positive rate.
    pub target_fp: f64,
    /// Keys estimated from the fill ratio.
    pub estimated_keys: f64,
    /// Distinct absent keys looked up in the active generation (through this origin).
    pub absent_keys: u64,
    /// Distinct false-positive keys among them.
    pub false_positive_keys: u64,
    /// Milliseconds since the active generation was named.
    pub active_age_ms: u64,
    /// Deletes since the build.
    pub deletes: u64,
}

/// Why to rebuild, and whether to resize.
#[derive(Clone, Debug, PartialEq)]
pub struct Action {
    /// Human-readable reason (logged, and in metrics).
    pub reason: &'static str,
    /// New capacity for a resize.
    pub capacity: Option<u64>,
    /// Only retire an overdue `previous` generation; no rebuild.
    pub retire_only: bool,
    /// How soon it should run, when more rebuilds are due than may run at once.
    pub urgency: Urgency,
}

/// How soon an action should run, most urgent first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Urgency {
    /// The bits are lost or untrusted: every lookup of the filter asks the database meanwhile.
    LostBits,
    /// More keys than capacity: the false-positive rate climbs as keys come.
    Resize,
    /// False positives above target, or many deleted keys still set.
    Drift,
}

impl Action {
    fn lost(reason: &'static str) -> Option<Action> {
        Some(Action { reason, capacity: None, retire_only: false, urgency: Urgency::LostBits })
    }

    fn drift(reason: &'static str) -> Option<Action> {
        Some(Action { reason, capacity: None, retire_only: false, urgency: Urgency::Drift })
    }
}

/// Which of the rebuilds `due` (filter, action, in listing order) to start now, with `running`
/// running and at most `max` at once: the most urgent first, in listing order among equals.
/// The others wait for a later check.
pub fn to_start(mut due: Vec<(String, Action)>, running: usize, max: usize) -> Vec<(String, Action)> {
    due.sort_by_key(|(_, action)| action.urgency);
    due.truncate(max.saturating_sub(running));
    due
}

/// The decision: lost bits first (correctness is not at stake, but every lookup pays the
/// database), then drift.
pub fn rebuild_reason(h: &Health, t: &Thresholds) -> Option<Action> {
    if h.building || h.dropped {
        return None;
    }
    if h.meta_missing {
        return Action::lost("filter metadata missing");
    }
    if h.incarnation_changed {
        return Action::lost("Redis restarted or failed over since the bits were written");
    }
    if h.building_abandoned {
        return Action::lost("a rebuild died before its switch");
    }
    if h.segment_missing {
        return Action::lost("filter segment missing");
    }
    if h.estimated_keys > h.capacity as f64 * t.resize_at_fill && h.doubled_fits {
        // Double, and leave room: twice the capacity, or twice the keys if they already
        // outgrew that.
        let doubled = h.capacity.saturating_mul(2).max((2.0 * h.estimated_keys).ceil() as u64);
        return Some(Action {
            reason: "more keys than capacity",
            capacity: Some(doubled),
            retire_only: false,
            urgency: Urgency::Resize,
        });
    }
    // Drift: a rebuild at most once per interval. A resize is not bounded so: only writers
    // (trusted, with a token) add keys, and each resize doubles the capacity.
    let drift_allowed = h.active_age_ms >= t.drift_rebuild_min_interval_ms;
    if drift_allowed
        && h.absent_keys >= t.fp_min_samples
        && (h.false_positive_keys as f64 / h.absent_keys as f64) > h.target_fp * t.fp_factor
    {
        return Action::drift("observed false positives above target");
    }
    if drift_allowed && h.estimated_keys > 0.0 && h.deletes as f64 > h.estimated_keys * t.stale_delete_share {
        return Action::drift("many deleted keys still set");
    }
    if h.previous_age_ms.is_some_and(|age| age > t.retire_previous_after_ms) {
        return Some(Action {
            reason: "replaced generation overdue for retirement",
            capacity: None,
            retire_only: true,
            urgency: Urgency::Drift,
        });
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Thresholds = Thresholds {
        resize_at_fill: 1.0,
        fp_factor: 3.0,
        fp_min_samples: 1000,
        stale_delete_share: 0.2,
        retire_previous_after_ms: 60_000,
        drift_rebuild_min_interval_ms: 600_000,
    };

    fn healthy() -> Health {
        Health {
            capacity: 1000,
            target_fp: 0.01,
            estimated_keys: 500.0,
            doubled_fits: true,
            active_age_ms: 3_600_000,
            ..Health::default()
        }
    }

    #[test]
    fn after_a_loss_of_many_filters_the_lost_ones_start_first_and_no_more_than_allowed() {
        let lost =
            |name: &str| (name.to_owned(), rebuild_reason(&Health { meta_missing: true, ..healthy() }, &T).unwrap());
        let drift = |name: &str| {
            let h = Health { deletes: 400, ..healthy() };
            (name.to_owned(), rebuild_reason(&h, &T).unwrap())
        };
        let resize = |name: &str| {
            (name.to_owned(), rebuild_reason(&Health { estimated_keys: 5000.0, ..healthy() }, &T).unwrap())
        };
        let due = vec![drift("a"), lost("b"), resize("c"), lost("d"), lost("e")];
        let names = |started: Vec<(String, Action)>| started.into_iter().map(|(n, _)| n).collect::<Vec<_>>();
        assert_eq!(names(to_start(due.clone(), 0, 2)), ["b", "d"], "lost bits first, in listing order");
        assert_eq!(names(to_start(due.clone(), 1, 2)), ["b"], "one running: one more");
        assert!(to_start(due.clone(), 2, 2).is_empty(), "the rest wait for a later check");
        assert_eq!(names(to_start(due, 0, 10)), ["b", "d", "e", "c", "a"], "then resizes, then drift");
    }

    #[test]
    fn healthy_filters_are_left_alone() {
        assert_eq!(rebuild_reason(&healthy(), &T), None);
    }

    #[test]
    fn lost_bits_rebuild_at_the_same_size() {
        let h = Health { meta_missing: true, ..healthy() };
        assert_eq!(rebuild_reason(&h, &T).unwrap().capacity, None);
        let h = Health { segment_missing: true, ..healthy() };
        assert!(rebuild_reason(&h, &T).is_some());
        let h = Health { meta_missing: true, building: true, ..healthy() };
        assert_eq!(rebuild_reason(&h, &T), None, "one rebuild at a time");
    }

    #[test]
    fn a_rolled_back_or_abandoned_filter_is_rebuilt() {
        let h = Health { incarnation_changed: true, ..healthy() };
        assert!(rebuild_reason(&h, &T).unwrap().reason.contains("restarted"));
        let h = Health { building_abandoned: true, ..healthy() };
        assert_eq!(rebuild_reason(&h, &T).unwrap().capacity, None, "a rebuild that died does not stop recovery");
        let h = Health { building_abandoned: true, building: true, ..healthy() };
        assert_eq!(rebuild_reason(&h, &T), None, "unless one is running now");
    }

    #[test]
    fn a_filter_being_dropped_is_never_rebuilt() {
        for h in [
            Health { dropped: true, meta_missing: true, ..healthy() },
            Health { dropped: true, estimated_keys: 5000.0, ..healthy() },
        ] {
            assert_eq!(rebuild_reason(&h, &T), None, "a rebuild would bring a dropped filter's bits back");
        }
    }

    #[test]
    fn a_resize_over_the_size_limit_is_not_started() {
        let h = Health { estimated_keys: 1001.0, doubled_fits: false, ..healthy() };
        assert_eq!(rebuild_reason(&h, &T), None);
    }

    #[test]
    fn an_overdue_replaced_generation_is_only_retired() {
        let h = Health { previous_age_ms: Some(61_000), ..healthy() };
        assert!(rebuild_reason(&h, &T).unwrap().retire_only);
        let h = Health { previous_age_ms: Some(1_000), ..healthy() };
        assert_eq!(rebuild_reason(&h, &T), None);
    }

    #[test]
    fn over_capacity_doubles() {
        let h = Health { estimated_keys: 1001.0, ..healthy() };
        assert_eq!(rebuild_reason(&h, &T).unwrap().capacity, Some(2002));
        let h = Health { estimated_keys: 900.0, capacity: 1000, ..healthy() };
        assert_eq!(rebuild_reason(&h, &T), None);
        let h = Health { estimated_keys: 4000.0, ..healthy() };
        assert_eq!(rebuild_reason(&h, &T).unwrap().capacity, Some(8000));
    }

    #[test]
    fn false_positives_need_enough_distinct_keys() {
        let h = Health { absent_keys: 999, false_positive_keys: 99, ..healthy() };
        assert_eq!(rebuild_reason(&h, &T), None, "999 samples are not enough");
        let h = Health { absent_keys: 1000, false_positive_keys: 50, ..healthy() };
        assert!(rebuild_reason(&h, &T).is_some(), "5 % observed vs 1 % target");
        let h = Health { absent_keys: 1000, false_positive_keys: 10, ..healthy() };
        assert_eq!(rebuild_reason(&h, &T), None);
    }

    #[test]
    fn drift_rebuilds_once_per_interval_resizes_and_lost_bits_at_once() {
        let young = Health { active_age_ms: 599_999, ..healthy() };
        for drifted in
            [Health { absent_keys: 1000, false_positive_keys: 500, ..young }, Health { deletes: 400, ..young }]
        {
            assert_eq!(rebuild_reason(&drifted, &T), None, "a generation younger than the interval");
            assert!(rebuild_reason(&Health { active_age_ms: 600_000, ..drifted }, &T).is_some());
        }
        assert!(rebuild_reason(&Health { estimated_keys: 1001.0, ..young }, &T).unwrap().capacity.is_some());
        assert!(rebuild_reason(&Health { segment_missing: true, ..young }, &T).is_some());
    }

    #[test]
    fn many_stale_deletes_rebuild() {
        let h = Health { deletes: 101, ..healthy() };
        assert!(rebuild_reason(&h, &T).is_some());
        let h = Health { deletes: 99, ..healthy() };
        assert_eq!(rebuild_reason(&h, &T), None);
    }
}
