//! The `x-bloomgate-*` headers, and how bloomgate writes the standard ones it relies on.

/// Who answered a lookup, as [`AnsweredBy::as_str`](crate::api::AnsweredBy::as_str) writes it:
/// on every lookup answer of the origin and the edge (a HEAD has only this to say who).
pub const ANSWERED_BY: &str = "x-bloomgate-answered-by";

/// On a "not seen" the edge answered: the filter generation whose segment ruled the key out.
pub const GENERATION: &str = "x-bloomgate-generation";

/// The edge's shared secret, on the edge's requests to the origin's manifest, segment and
/// journal endpoints.
pub const EDGE_SECRET: &str = "x-bloomgate-edge-secret";

/// On a segment: the version of its bits (also in its ETag).
pub const SEGMENT_VERSION: &str = "x-bloomgate-segment-version";

/// On a journal chunk: the entries the journal had when it was read; the chunk reaches the
/// head when its end is this.
pub const JOURNAL_HEAD: &str = "x-bloomgate-journal-head";

/// On a journal chunk: the generation a manifest would have named, read after the request
/// arrived and before the entries (absent when none is readable).
pub const READABLE_GENERATION: &str = "x-bloomgate-readable-generation";

/// `Retry-After`: on every 429 and 503 of the origin and the edge, always in whole seconds
/// (never the HTTP-date form).
pub const RETRY_AFTER: &str = "retry-after";

/// `Cache-Control` (see [`crate::caching`] for the values).
pub const CACHE_CONTROL: &str = "cache-control";

/// `Content-Type` (see [`crate::media`] for the values).
pub const CONTENT_TYPE: &str = "content-type";

/// The wait a `Retry-After` value asks for, in seconds: the form bloomgate writes. None for
/// anything else (the date form is not bloomgate's).
pub fn retry_after_secs(value: &str) -> Option<u64> {
    value.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_is_read_in_seconds() {
        assert_eq!(retry_after_secs("3"), Some(3));
        assert_eq!(retry_after_secs(" 1 "), Some(1));
        assert_eq!(retry_after_secs("Wed, 21 Oct 2026 07:28:00 GMT"), None, "the date form is not bloomgate's");
    }

    #[test]
    fn header_names_are_lowercase_as_http2_sends_them() {
        for name in [ANSWERED_BY, GENERATION, EDGE_SECRET, SEGMENT_VERSION, JOURNAL_HEAD, READABLE_GENERATION] {
            assert_eq!(name, name.to_ascii_lowercase());
            assert!(name.starts_with("x-bloomgate-"), "{name}");
        }
    }
}
