//! Manifests at the edge: when one may be used, when its successor is fetched, what a journal
//! chunk makes of it, and which of two is kept. The I/O (`fetch`, wasm32 only) gets a manifest
//! from isolate memory, from the journal alone, or from the origin.
//!
//! A manifest is used for at most `FRESHNESS_SECS` after the edge *asked* for it: the origin
//! reads what it names after the request arrives, so it covers every key acknowledged before
//! the ask ([`is_fresh`]). Its successor is fetched in the background from half of that on
//! ([`wants_refresh`]), so under steady traffic no lookup waits for one. Under a journal the
//! successor usually comes from the journal request that refreshes the held segments anyway
//! ([`refreshed`]): a generation's params and key format never change, so all a new manifest
//! would add is the journal's head.

use bloomgate_filter::{JournalPosition, Manifest};
use std::rc::Rc;

/// Outcome of asking for a manifest.
#[derive(Clone, Debug)]
pub enum ManifestFetch {
    /// The manifest, and when it was asked for (ms).
    Found(Rc<Manifest>, f64),
    /// The origin says the filter does not exist: its problem body, relayed.
    Unknown(Rc<Vec<u8>>),
    /// No manifest could be had in time.
    Failed,
}

/// Whether a manifest asked for at `asked_at_ms` may still be used at `now_ms`.
pub fn is_fresh(asked_at_ms: f64, now_ms: f64, freshness_secs: u32) -> bool {
    // Negative control (test builds only): no bound.
    if crate::planted::active(crate::planted::Bug::IgnoreFreshness) {
        return now_ms >= asked_at_ms;
    }
    now_ms >= asked_at_ms && now_ms - asked_at_ms < f64::from(freshness_secs) * 1000.0
}

/// Whether a manifest still fresh at `now_ms` is old enough to fetch its successor in the
/// background, so that under steady traffic no request waits for a manifest: past half its
/// freshness.
pub fn wants_refresh(asked_at_ms: f64, now_ms: f64, freshness_secs: u32) -> bool {
    now_ms - asked_at_ms >= f64::from(freshness_secs) * 500.0
}

/// The manifest a chunk ending at `to` stands for: `old` with `to` as its head, when the chunk
/// reached the journal's head (`head`: the entries it had when read) and its generation is the
/// one a manifest would name (`readable`). None: ask for the manifest.
pub fn refreshed(old: &Manifest, to: JournalPosition, head: Option<u64>, readable: Option<u64>) -> Option<Manifest> {
    let reached = head == Some(to.added);
    let still_named = readable == Some(old.generation);
    let forward = old.journal.is_some_and(|old_head| to.added >= old_head.added);
    (reached && still_named && forward).then(|| Manifest { journal: Some(to), ..old.clone() })
}

/// Whether a manifest asked for at `asked_at_ms` replaces the one kept (asked for at `kept`):
/// only a later ask covers at least as much.
pub fn replaces(kept: Option<f64>, asked_at_ms: f64) -> bool {
    kept.is_none_or(|kept| kept <= asked_at_ms)
}

/// Bytes a kept manifest takes, roughly: its per-segment versions (none under a journal), its
/// name and a fixed part.
pub fn bytes_of(manifest: &Manifest) -> usize {
    manifest.segment_versions.capacity() * 8 + manifest.filter.capacity() + 160
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{at, params};

    fn manifest(head: Option<u64>) -> Manifest {
        crate::testing::manifest(params(3), 4, head.map(at))
    }

    #[test]
    fn freshness_window() {
        assert!(is_fresh(1000.0, 1000.0, 5));
        assert!(is_fresh(1000.0, 5999.0, 5));
        assert!(!is_fresh(1000.0, 6000.0, 5));
        assert!(!is_fresh(1000.0, 999.0, 5), "a clock going backwards is not fresh");
    }

    #[test]
    fn a_manifest_is_refreshed_ahead_from_half_its_freshness() {
        assert!(!wants_refresh(1000.0, 3499.0, 5));
        assert!(wants_refresh(1000.0, 3500.0, 5));
        assert!(is_fresh(1000.0, 3500.0, 5), "refresh starts while the copy is still in use");
    }

    #[test]
    fn a_chunk_is_a_manifest_only_when_it_reaches_the_head_of_the_generation_still_named() {
        let old = manifest(Some(100));
        let next = refreshed(&old, at(130), Some(130), Some(9)).unwrap();
        assert_eq!(next.journal, Some(at(130)));
        assert_eq!(Manifest { journal: old.journal, ..next.clone() }, old, "all else as it was");
        assert_eq!(refreshed(&old, at(100), Some(100), Some(9)).unwrap().journal, Some(at(100)), "no writes since");
        assert_eq!(refreshed(&old, at(130), Some(131), Some(9)), None, "cut short of the head");
        assert_eq!(refreshed(&old, at(130), None, Some(9)), None, "head not said");
        assert_eq!(refreshed(&old, at(130), Some(130), Some(10)), None, "another generation is named now");
        assert_eq!(refreshed(&old, at(130), Some(130), None), None, "none readable");
        assert_eq!(refreshed(&old, at(90), Some(90), Some(9)), None, "behind the old head: not this journal");
        assert_eq!(refreshed(&manifest(None), at(130), Some(130), Some(9)), None, "no journal, no refresh by it");
    }

    #[test]
    fn only_a_later_ask_replaces_the_kept_manifest() {
        assert!(replaces(None, 5.0));
        assert!(replaces(Some(5.0), 5.0) && replaces(Some(5.0), 6.0));
        assert!(!replaces(Some(6.0), 5.0), "a slow fetch asked earlier does not undo a newer one");
        let slim = Manifest { segment_versions: Vec::new(), ..manifest(Some(1)) };
        assert!(bytes_of(&slim) < bytes_of(&manifest(None)), "under a journal a manifest lists no versions");
    }
}
