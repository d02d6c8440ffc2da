//! Pure decisions about what the edge answers: bodies, content types and where a lookup goes.

use serde::Serialize;

/// Content type of every JSON body the edge writes itself.
pub const JSON: &str = "application/json";
/// Content type of error bodies (RFC 9457 problem details).
pub const PROBLEM_JSON: &str = "application/problem+json";

/// Body of `GET /healthz`.
#[derive(Debug, Serialize)]
pub struct Health {
    /// Always `true`: the worker is answering.
    pub ok: bool,
    /// Which tier answered, so a caller can tell the edge from the origin.
    pub edge: &'static str,
}

/// The health body, `{"ok":true,"edge":"bloomgate"}`.
pub fn health() -> Health {
    Health { ok: true, edge: "bloomgate" }
}

/// An RFC 9457 problem body. `detail` never carries internals (addresses, stack traces).
#[derive(Debug, Serialize)]
pub struct Problem {
    /// Problem type URI; `about:blank` means the status says it all.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// Short summary of the problem type.
    pub title: &'static str,
    /// HTTP status code, repeated in the body.
    pub status: u16,
    /// Explanation specific to this occurrence.
    pub detail: String,
}

/// 404 for any route the edge does not serve.
pub fn not_found(path: &str) -> Problem {
    Problem { kind: "about:blank", title: "Not Found", status: 404, detail: format!("no route for {path}") }
}

/// 502 when the origin could not be reached; the cause goes to the log, not the body.
pub fn origin_unreachable() -> Problem {
    Problem {
        kind: "about:blank",
        title: "Bad Gateway",
        status: 502,
        detail: "the origin could not be reached".to_owned(),
    }
}

/// 500 when the worker's own settings are unusable.
pub fn misconfigured() -> Problem {
    Problem {
        kind: "about:blank",
        title: "Internal Server Error",
        status: 500,
        detail: "the edge is misconfigured".to_owned(),
    }
}

/// Header naming who answered a lookup; the edge writes `edge` when it answered alone.
pub const ANSWERED_BY: &str = "x-bloomgate-answered-by";

/// Header on an edge "no": the filter generation whose segment answered (for operators
/// following a rebuild to the edge, and for the tests that prove the edge follows it).
pub const GENERATION: &str = "x-bloomgate-generation";

/// Body of a "not seen" answered at the edge: the same shape as the origin's.
#[derive(Debug, Serialize)]
pub struct NotSeen<'a> {
    /// Filter name.
    pub filter: &'a str,
    /// Key as sent.
    pub key: &'a str,
    /// Always false.
    pub seen: bool,
    /// Always `edge`.
    pub answered_by: &'static str,
}

/// The 404 body for a key the edge's segment rules out.
pub fn not_seen<'a>(filter: &'a str, key: &'a str) -> NotSeen<'a> {
    NotSeen { filter, key, seen: false, answered_by: "edge" }
}

/// 400 for a key or filter name that the origin would refuse too, with the same reason.
pub fn bad_request(detail: String) -> Problem {
    Problem { kind: "about:blank", title: "Bad Request", status: 400, detail }
}

/// 413 for a request body over what the edge reads.
pub fn body_too_large(max_bytes: usize) -> Problem {
    Problem {
        kind: "about:blank",
        title: "Content Too Large",
        status: 413,
        detail: format!("request body is over {max_bytes} bytes: send smaller batches"),
    }
}

/// 413 for a batch with more keys than `MAX_BATCH`, refused before any lookup: the same
/// words as the origin's.
pub fn batch_too_large(max: usize, got: usize) -> Problem {
    Problem {
        kind: "about:blank",
        title: "Content Too Large",
        status: 413,
        detail: format!("batch has {got} keys; at most {max} are accepted per request: split it into smaller requests"),
    }
}

/// Whether the edge relays the origin's answer to a forwarded lookup as it is: answers (200,
/// 404) and the origin's refusals (400, 413, 429 with its Retry-After: the client must change
/// or slow its request, which a 503 would hide). A 5xx, like no answer, becomes a 503.
pub fn relays(origin_status: u16) -> bool {
    (200..500).contains(&origin_status)
}

/// Headers of the origin's answer that the edge passes on when it relays it.
pub const RELAYED_HEADERS: [&str; 3] = ["content-type", ANSWERED_BY, "retry-after"];

/// 405 for writes: the edge serves lookups only.
pub fn write_not_allowed(method: &str, path: &str) -> Problem {
    Problem {
        kind: "about:blank",
        title: "Method Not Allowed",
        status: 405,
        detail: format!(
            "{method} {path} is not served at the edge: writes go to the origin's write API (PUT/POST/DELETE /v1/filters/{{filter}}/keys on the origin, with a writer token)"
        ),
    }
}

/// 503 when a lookup had to be forwarded and the origin did not answer: the answer is unknown,
/// never "not seen". Sent with `Retry-After`.
pub fn origin_unavailable() -> Problem {
    Problem {
        kind: "about:blank",
        title: "Service Unavailable",
        status: 503,
        detail: "the origin could not be reached; the answer is unknown, not 'absent'. Retry after the delay"
            .to_owned(),
    }
}

/// The origin URL a request is relayed to: same path and query, origin's scheme and host.
///
/// `path_and_query` is taken as the runtime gives it (already percent-encoded), so a key
/// reaches the origin byte for byte as the client sent it.
pub fn origin_url(origin_base: &str, path_and_query: &str) -> String {
    let base = origin_base.trim_end_matches('/');
    let rest = path_and_query.trim_start_matches('/');
    format!("{base}/{rest}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edge_answers_have_the_origins_shape() {
        let body = serde_json::to_value(not_seen("f", "ab")).unwrap();
        assert_eq!(body, serde_json::json!({"filter":"f","key":"ab","seen":false,"answered_by":"edge"}));
        assert_eq!(write_not_allowed("PUT", "/v1/filters/f/keys/a").status, 405);
        assert_eq!(origin_unavailable().status, 503);
        assert_eq!(bad_request("key must be 64 hex digits, got 63".into()).detail, "key must be 64 hex digits, got 63");
    }

    #[test]
    fn refusals_from_the_origin_are_relayed_and_failures_are_not() {
        for status in [200, 404, 400, 413, 429] {
            assert!(relays(status), "{status}");
        }
        for status in [500, 502, 503, 504] {
            assert!(!relays(status), "{status} becomes the edge's own 503");
        }
    }

    #[test]
    fn too_large_answers_say_413_in_the_body_too() {
        let p = batch_too_large(1000, 1001);
        assert_eq!((p.status, p.title), (413, "Content Too Large"));
        assert_eq!(
            p.detail,
            "batch has 1001 keys; at most 1000 are accepted per request: split it into smaller requests"
        );
        assert_eq!(body_too_large(4).status, 413);
    }

    #[test]
    fn health_body_is_stable() {
        assert_eq!(serde_json::to_string(&health()).unwrap(), r#"{"ok":true,"edge":"bloomgate"}"#);
    }

    #[test]
    fn problem_body_uses_rfc_field_names() {
        let body: serde_json::Value = serde_json::to_value(not_found("/nope")).unwrap();
        assert_eq!(body["type"], "about:blank");
        assert_eq!(body["status"], 404);
        assert_eq!(body["detail"], "no route for /nope");
    }

    #[test]
    fn origin_url_keeps_path_and_query_verbatim() {
        assert_eq!(
            origin_url("http://127.0.0.1:8080/", "/v1/filters/users/keys/a%2Fb?trace=1"),
            "http://127.0.0.1:8080/v1/filters/users/keys/a%2Fb?trace=1"
        );
        assert_eq!(origin_url("http://o", "v1/x"), "http://o/v1/x");
    }
}
