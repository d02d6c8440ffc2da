//! Copies in the Cache API: the key a copy is kept under, and when a copy the journal brought
//! forward is written back there.
//!
//! Under a journal there is one key per segment of a generation: a copy names its own position
//! and is brought forward from there, so whichever copy is kept is good for a start. What such
//! a copy costs an isolate that reads it grows with its age: the hashes added to its segment
//! since, and a journal tail that reaches back to it (the origin keeps the journal for a
//! limited time; past that the segment is fetched whole). So an isolate that had to bring an
//! old copy forward puts the result back, at a bounded rate ([`WriteBacks`]): each write-back
//! is a Cache API write, not an origin request, and keeps every copy there within minutes of
//! the head for the next reader. Without a journal, one key per version: immutable content.
//!
//! What is stored under a key is an entry ([`crate::cache_entry`]): the copy's segment behind a
//! MAC over the key and the segment, so a copy is read back only from where this edge put it.

use bloomgate_filter::segment::SEGMENT_HEADER_BYTES_JOURNAL;
use bloomgate_filter::{JournalPosition, Manifest};

/// A copy brought forward is written back when its own position was at least this much older
/// (by the journal's clock) than the head it was brought to: well inside the origin's default
/// journal retention (10 minutes), so copies read back are always within it.
pub const WRITE_BACK_AGE_MS: u64 = 60_000;
/// Write-backs an isolate makes per second at most, on average ...
pub const WRITE_BACKS_PER_SEC: f64 = 4.0;
/// ... and at once.
pub const WRITE_BACK_BURST: f64 = 8.0;

/// The Cache API key a copy of segment `index` at `version` is kept under: see the module doc.
pub fn segment_cache_url(manifest: &Manifest, index: u32, version: u64) -> String {
    let path = bloomgate_client::paths::segment(&manifest.filter, manifest.generation, index);
    let base = format!("https://bloomgate-edge.cache{path}");
    match manifest.journal {
        Some(_) => base,
        None => format!("{base}?v={version}"),
    }
}

/// The Cache API key to look for a copy of segment `index` under: see [`segment_cache_url`].
/// None for an index the manifest does not have.
pub fn wanted_cache_url(manifest: &Manifest, index: u32) -> Option<String> {
    match manifest.journal {
        Some(_) => (index < manifest.params.segment_count).then(|| segment_cache_url(manifest, index, 0)),
        None => Some(segment_cache_url(manifest, index, manifest.segment_version(index)?)),
    }
}

/// Most bytes an entry's content may have under `manifest`: a segment of its filter in the
/// larger header format. An entry declaring more is refused before it is read into memory.
pub fn max_entry_content(manifest: &Manifest) -> usize {
    SEGMENT_HEADER_BYTES_JOURNAL + manifest.params.segment_bytes() as usize
}

/// Whether a copy read at position `was` and brought forward to `now` is worth writing back.
pub fn worth_writing_back(was: JournalPosition, now: JournalPosition) -> bool {
    now.added > was.added && now.id_ms.saturating_sub(was.id_ms) >= WRITE_BACK_AGE_MS
}

/// A token bucket for write-backs: [`WRITE_BACKS_PER_SEC`] on average, [`WRITE_BACK_BURST`]
/// at once.
#[derive(Debug)]
pub struct WriteBacks {
    tokens: f64,
    at_ms: f64,
}

impl Default for WriteBacks {
    fn default() -> Self {
        WriteBacks { tokens: WRITE_BACK_BURST, at_ms: f64::NAN }
    }
}

impl WriteBacks {
    /// Takes a write-back at `now_ms` if the rate allows one.
    pub fn allow(&mut self, now_ms: f64) -> bool {
        let elapsed = if self.at_ms.is_nan() { 0.0 } else { (now_ms - self.at_ms).max(0.0) };
        self.at_ms = now_ms;
        self.tokens = (self.tokens + elapsed / 1000.0 * WRITE_BACKS_PER_SEC).min(WRITE_BACK_BURST);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest() -> Manifest {
        crate::testing::manifest(crate::testing::params(7), 3, None)
    }

    #[test]
    fn cache_urls_carry_generation_and_version_unless_copies_name_their_position() {
        let mut manifest = manifest();
        assert_eq!(segment_cache_url(&manifest, 2, 7), "https://bloomgate-edge.cache/v1/filters/f/segments/9/2?v=7");
        assert_eq!(
            wanted_cache_url(&manifest, 2).unwrap(),
            "https://bloomgate-edge.cache/v1/filters/f/segments/9/2?v=3"
        );
        manifest.journal = Some(JournalPosition { added: 8, id_ms: 1, id_seq: 0 });
        manifest.segment_versions.clear();
        assert_eq!(segment_cache_url(&manifest, 2, 7), "https://bloomgate-edge.cache/v1/filters/f/segments/9/2");
        assert_eq!(wanted_cache_url(&manifest, 2), Some(segment_cache_url(&manifest, 2, 7)));
        assert_eq!(wanted_cache_url(&manifest, manifest.params.segment_count), None);
    }

    #[test]
    fn an_entry_may_hold_a_segment_of_either_format_and_no_more() {
        use bloomgate_filter::{encode_segment, encode_segment_at};
        let manifest = manifest();
        let payload = vec![0; manifest.params.segment_bytes() as usize];
        let v1 = encode_segment(&manifest.params, 9, 0, 1, &payload).unwrap();
        let v2 = encode_segment_at(&manifest.params, 9, 0, 1, crate::testing::at(4), &payload).unwrap();
        assert!(v1.len() < v2.len());
        assert_eq!(max_entry_content(&manifest), v2.len());
    }

    #[test]
    fn only_copies_a_minute_behind_are_written_back() {
        let at = |added: u64, id_ms: u64| JournalPosition { added, id_ms, id_seq: 0 };
        assert!(worth_writing_back(at(10, 1_000), at(20, 61_000)));
        assert!(!worth_writing_back(at(10, 1_000), at(20, 60_999)), "under a minute");
        assert!(!worth_writing_back(at(20, 1_000), at(20, 99_000)), "nothing added");
    }

    #[test]
    fn write_backs_are_rate_limited() {
        let mut bucket = WriteBacks::default();
        let burst = (0..20).filter(|_| bucket.allow(1_000.0)).count();
        assert_eq!(burst, WRITE_BACK_BURST as usize);
        assert!(!bucket.allow(1_100.0), "0.4 of a token after 100 ms");
        assert!(bucket.allow(1_300.0), "1.2 after 300 ms");
        let in_ten_seconds = (1..=1_000).filter(|i| bucket.allow(1_300.0 + *i as f64 * 10.0)).count();
        assert!((39..=41).contains(&in_ten_seconds), "{in_ten_seconds}");
    }
}
