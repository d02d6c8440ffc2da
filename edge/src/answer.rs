//! Pure decisions about what the edge answers: bodies, which origin answers are relayed, where a
//! lookup goes. Bodies, header names and content types are the wire contract's
//! (`bloomgate_client`), so a client reads the edge's answers as it reads the origin's.

use bloomgate_client::api::{AnsweredBy, BatchKeysError, KeyAnswer, Problem};
use bloomgate_client::{caching, headers, media};
use serde::Serialize;

/// Content type of every JSON body the edge writes itself.
pub const JSON: &str = media::JSON;
/// Content type of error bodies (RFC 9457 problem details).
pub const PROBLEM_JSON: &str = media::PROBLEM_JSON;

/// Seconds the edge's own 503s ask a client to wait (`Retry-After`).
pub const RETRY_AFTER_SECS: &str = "1";

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

/// 404 for any route the edge does not serve.
pub fn not_found(path: &str) -> Problem {
    Problem::new(404, format!("no route for {path}")).with_hint(
        "The edge serves lookups: GET or HEAD /v1/filters/{filter}/keys/{key}, POST /v1/filters/{filter}/lookups.",
    )
}

/// 502 when the origin could not be reached; the cause goes to the log, not the body.
pub fn origin_unreachable() -> Problem {
    Problem::new(502, "the origin could not be reached")
}

/// 500 when the worker's own settings are unusable.
pub fn misconfigured() -> Problem {
    Problem::new(500, "the edge is misconfigured")
}

/// The 404 body for a key the edge's segment rules out: the origin's [`KeyAnswer`], answered
/// by the edge.
pub fn not_seen(filter: &str, key: &str) -> KeyAnswer {
    KeyAnswer::not_seen(filter, key, AnsweredBy::Edge)
}

/// 400 for a key or filter name that the origin would refuse too, with the same reason.
pub fn bad_request(detail: String) -> Problem {
    Problem::new(400, detail)
}

/// 413 for a request body over what the edge reads.
pub fn body_too_large(max_bytes: usize) -> Problem {
    Problem::new(413, format!("request body is over {max_bytes} bytes: send smaller batches"))
}

/// 413 for a batch with more keys than `MAX_BATCH`, refused before any lookup: the same
/// words as the origin's (the wire contract holds them).
pub fn batch_too_large(max: usize, got: usize) -> Problem {
    Problem::new(413, BatchKeysError::too_many_detail(max, got)).with_hint(BatchKeysError::TOO_MANY_HINT)
}

/// What the edge makes of the origin's answer to a forwarded lookup.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OriginAnswer {
    /// Relayed as it is: a key's answer (200, 404) naming who answered it
    /// (`x-bloomgate-answered-by`), or one of the origin's refusals (4xx with a problem body:
    /// no such filter, a bad key, too large, 429 with its Retry-After), which the client must
    /// see, as a 503 would hide them.
    Relay,
    /// Something else answered at `ORIGIN_URL` (a load balancer's or another service's 404, a
    /// page): 502, never relayed, as a 404 from anything but bloomgate would read as "not seen".
    NotBloomgate,
    /// A 5xx, like no answer: the edge's own 503 (the answer is unknown).
    Unavailable,
}

/// Judges the origin's answer by its status, `x-bloomgate-answered-by` and `Content-Type`.
pub fn judge_origin_answer(status: u16, answered_by: Option<&str>, content_type: Option<&str>) -> OriginAnswer {
    let answered = answered_by.and_then(AnsweredBy::parse).is_some_and(|by| by != AnsweredBy::Edge);
    let refusal = content_type.is_some_and(media::is_problem);
    match status {
        200 | 404 if answered => OriginAnswer::Relay,
        400..=499 if refusal => OriginAnswer::Relay,
        200..=499 => OriginAnswer::NotBloomgate,
        _ => OriginAnswer::Unavailable,
    }
}

/// 502 for an answer at `ORIGIN_URL` that is not bloomgate's ([`OriginAnswer::NotBloomgate`]).
pub fn not_bloomgate(status: u16) -> Problem {
    Problem::new(502, format!("the origin answered {status} without bloomgate's headers; the answer is unknown"))
        .with_hint(
        "ORIGIN_URL, or a route in front of the origin, reaches something that is not bloomgate's origin: check it.",
    )
}

/// Headers of the origin's answer that the edge passes on when it relays it. Not
/// `Cache-Control`: the edge writes its own ([`CACHE_CONTROL`]).
pub const RELAYED_HEADERS: [&str; 3] = [headers::CONTENT_TYPE, headers::ANSWERED_BY, headers::RETRY_AFTER];

/// The `Cache-Control` of everything the edge answers: its own "no"s, the origin's answers it
/// relays, its refusals. They are lookup answers or errors, none of which a cache on the way
/// may keep (see `caching::LOOKUP` for why), whatever the origin's answer said.
pub const CACHE_CONTROL: &str = caching::LOOKUP;

/// The headers of a relayed origin answer, from the origin's (`origin_header` reads one by
/// name): [`RELAYED_HEADERS`] as the origin sent them, then the edge's own `Cache-Control`.
pub fn relayed_headers(origin_header: impl Fn(&str) -> Option<String>) -> Vec<(&'static str, String)> {
    let mut out: Vec<(&'static str, String)> =
        RELAYED_HEADERS.iter().filter_map(|name| origin_header(name).map(|value| (*name, value))).collect();
    out.push((headers::CACHE_CONTROL, CACHE_CONTROL.to_owned()));
    out
}

/// 405 for writes: the edge serves lookups only.
pub fn write_not_allowed(method: &str, path: &str) -> Problem {
    Problem::new(405, format!("{method} {path} is not served at the edge"))
        .with_hint("Writes go to the origin's write API (PUT/POST/DELETE /v1/filters/{filter}/keys on the origin, with a writer token).")
}

/// 503 when a lookup had to be forwarded and the origin did not answer: the answer is unknown,
/// never "not seen". Sent with `Retry-After`.
pub fn origin_unavailable() -> Problem {
    Problem::new(503, "the origin could not be reached; the answer is unknown, not 'absent'")
        .with_hint("Retry after the delay.")
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
    fn the_edges_no_reads_as_the_clients_key_answer_answered_by_the_edge() {
        let text = serde_json::to_string(&not_seen("f", "ab")).unwrap();
        assert_eq!(text, r#"{"filter":"f","key":"ab","seen":false,"answered_by":"edge"}"#);
        let answer: KeyAnswer = serde_json::from_str(&text).unwrap();
        assert_eq!(answer.answered_by, AnsweredBy::Edge);
        assert!(!answer.seen);
        assert_eq!((answer.filter.as_str(), answer.key.as_str(), answer.value), ("f", "ab", None));
    }

    #[test]
    fn edge_problems_are_the_contracts_problem() {
        assert_eq!(write_not_allowed("PUT", "/v1/filters/f/keys/a").status, 405);
        assert_eq!(origin_unavailable().status, 503);
        assert_eq!(bad_request("key must be 64 hex digits, got 63".into()).detail, "key must be 64 hex digits, got 63");
        let text = origin_unavailable().to_json();
        let problem: Problem = serde_json::from_str(&text).unwrap();
        assert_eq!((problem.kind.as_str(), problem.title.as_str()), ("about:blank", "Service Unavailable"));
        assert!(problem.hint.is_some());
    }

    #[test]
    fn answers_and_refusals_from_the_origin_are_relayed_and_failures_are_not() {
        let problem = Some("application/problem+json");
        for by in ["filter", "database"] {
            assert_eq!(judge_origin_answer(200, Some(by), Some("application/json")), OriginAnswer::Relay);
            assert_eq!(judge_origin_answer(404, Some(by), None), OriginAnswer::Relay, "a HEAD has no body");
        }
        for status in [400, 404, 413, 429] {
            assert_eq!(judge_origin_answer(status, None, problem), OriginAnswer::Relay, "{status}");
        }
        for status in [500, 502, 503, 504] {
            assert_eq!(judge_origin_answer(status, None, problem), OriginAnswer::Unavailable, "{status}");
        }
    }

    #[test]
    fn a_404_from_anything_but_the_origin_is_never_relayed() {
        // A load balancer's or another service's answer at ORIGIN_URL: relayed, it would read
        // as "not seen".
        for (status, by, content_type) in [
            (404, None, Some("text/html")),
            (404, None, Some("application/json")),
            (404, None, None),
            (200, None, Some("text/html")),
            (404, Some("edge"), Some("application/json")),
            (404, Some("cdn"), Some("application/json")),
            (301, None, None),
        ] {
            assert_eq!(judge_origin_answer(status, by, content_type), OriginAnswer::NotBloomgate, "{status} {by:?}");
        }
        assert_eq!(not_bloomgate(404).status, 502);
    }

    #[test]
    fn a_relayed_answer_carries_the_edges_cache_control_not_the_origins() {
        let origin = |name: &str| match name {
            "content-type" => Some("application/json".to_owned()),
            "x-bloomgate-answered-by" => Some("database".to_owned()),
            "cache-control" => Some("public, max-age=600".to_owned()),
            "set-cookie" => Some("a=b".to_owned()),
            _ => None,
        };
        let relayed = relayed_headers(origin);
        assert_eq!(
            relayed,
            [
                ("content-type", "application/json".to_owned()),
                ("x-bloomgate-answered-by", "database".to_owned()),
                ("cache-control", "no-store".to_owned()),
            ]
        );
        let refused = relayed_headers(|name| (name == "retry-after").then(|| "2".to_owned()));
        assert_eq!(refused, [("retry-after", "2".to_owned()), ("cache-control", "no-store".to_owned())]);
    }

    #[test]
    fn too_large_answers_say_413_in_the_body_too() {
        let p = batch_too_large(1000, 1001);
        assert_eq!((p.status, p.title.as_str()), (413, "Content Too Large"));
        assert_eq!(p.detail, "batch has 1001 keys; at most 1000 are accepted per request");
        assert_eq!(p.hint.as_deref(), Some("Split the batch into smaller requests."));
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
