//! Content types of what bloomgate sends and accepts.

/// JSON bodies: every answer but errors, and the batch requests.
pub const JSON: &str = "application/json";
/// Error bodies: RFC 9457 problem details ([`Problem`](crate::api::Problem)).
pub const PROBLEM_JSON: &str = "application/problem+json";
/// A stored value sent with `PUT .../keys/{key}`.
pub const OCTET_STREAM: &str = "application/octet-stream";
/// A segment, in `bloomgate_filter::segment`'s wire format.
pub const SEGMENT: &str = "application/vnd.bloomgate.segment";
/// A journal chunk, in `bloomgate_filter::journal`'s wire format.
pub const JOURNAL: &str = "application/vnd.bloomgate.journal";

/// The media type of a `Content-Type` value, without parameters (`; charset=...`).
fn essence(content_type: &str) -> &str {
    content_type.split(';').next().unwrap_or_default().trim()
}

/// Whether a `Content-Type` value is JSON (parameters and case aside).
pub fn is_json(content_type: &str) -> bool {
    essence(content_type).eq_ignore_ascii_case(JSON)
}

/// Whether a `Content-Type` value is a problem body: an error, not an answer.
pub fn is_problem(content_type: &str) -> bool {
    essence(content_type).eq_ignore_ascii_case(PROBLEM_JSON)
}

/// A page of a sealed journal chunk (`bloomgate_filter::sealed_page`).
pub const SEALED_PAGE: &str = "application/vnd.bloomgate.sealed-page";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn types_are_matched_without_their_parameters() {
        assert!(is_json("application/json; charset=utf-8") && is_json("Application/JSON"));
        assert!(!is_json(PROBLEM_JSON) && !is_json("application/jsonx"));
        assert!(is_problem("application/problem+json") && !is_problem(JSON));
    }
}
