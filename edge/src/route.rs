//! Which requests the edge serves: lookups, the health check, the isolate's report; writes get
//! a 405 pointing at the origin's write API; nothing else is forwarded.

use bloomgate_client::paths;

/// What a request is.
#[derive(Debug, PartialEq, Eq)]
pub enum Route<'a> {
    /// `GET /healthz`.
    Health,
    /// `GET /_bloomgate/isolate`: what the isolate holds and did (edge secret).
    Isolate,
    /// `GET` or `HEAD /v1/filters/{filter}/keys/{key}` (`key` still percent-encoded: decode it
    /// with `bloomgate_filter::decode_path_key`, as the origin does).
    Lookup {
        /// Filter name.
        filter: &'a str,
        /// Key as in the URL.
        key: &'a str,
    },
    /// `POST /v1/filters/{filter}/lookups`.
    BatchLookup {
        /// Filter name.
        filter: &'a str,
    },
    /// A write or other method on a lookup path: served by the origin's write API only.
    WriteNotAllowed,
    /// Anything else: answered 404 here, never forwarded.
    NotFound,
}

/// Classifies a request by method and path (no query string), against the contract's route
/// patterns: the origin's router and the edge read a path alike.
pub fn classify<'a>(method: &str, path: &'a str) -> Route<'a> {
    if paths::matches(paths::HEALTHZ, path).is_some() {
        return if method == "GET" || method == "HEAD" { Route::Health } else { Route::WriteNotAllowed };
    }
    let reads = method == "GET" || method == "HEAD";
    if paths::matches(paths::ISOLATE, path).is_some() {
        return if reads { Route::Isolate } else { Route::WriteNotAllowed };
    }
    if let Some([filter, key]) = paths::matches(paths::KEY, path).as_deref() {
        // HEAD is a GET without the body (the origin serves both from one route): a HEAD for a
        // stored key must find it, not fall through to "no route". An empty key is a lookup
        // too, refused by the decoder with the reason: the runtime's URL parser leaves it
        // empty when the client sent `.` or `%2e`.
        return match (reads, filter.is_empty(), key.is_empty()) {
            (true, false, _) => Route::Lookup { filter, key },
            (false, _, false) => Route::WriteNotAllowed,
            _ => Route::NotFound,
        };
    }
    if let Some([filter]) = paths::matches(paths::LOOKUPS, path).as_deref() {
        return match (method, filter.is_empty()) {
            ("POST", false) => Route::BatchLookup { filter },
            (_, _) if reads => Route::NotFound,
            _ => Route::WriteNotAllowed,
        };
    }
    // Writes to a filter or its keys are the origin's; every other path is not served here.
    let writable = [paths::KEYS, paths::FILTER].iter().any(|pattern| paths::matches(pattern, path).is_some());
    if writable && !reads {
        return Route::WriteNotAllowed;
    }
    Route::NotFound
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookups_writes_and_everything_else() {
        assert_eq!(classify("GET", "/v1/filters/f/keys/abc"), Route::Lookup { filter: "f", key: "abc" });
        assert_eq!(classify("POST", "/v1/filters/f/lookups"), Route::BatchLookup { filter: "f" });
        assert_eq!(classify("PUT", "/v1/filters/f/keys/abc"), Route::WriteNotAllowed);
        assert_eq!(classify("DELETE", "/v1/filters/f/keys/abc"), Route::WriteNotAllowed);
        assert_eq!(classify("POST", "/v1/filters/f/keys"), Route::WriteNotAllowed);
        assert_eq!(classify("PUT", "/v1/filters/f"), Route::WriteNotAllowed);
        assert_eq!(classify("GET", "/v1/filters/f/stats"), Route::NotFound);
        assert_eq!(classify("GET", "/v1/filters/f/manifest"), Route::NotFound, "segments are never served publicly");
        assert_eq!(classify("GET", "/v1/filters/f/segments/1/0"), Route::NotFound);
        assert_eq!(
            classify("GET", "/v1/filters/f/keys/"),
            Route::Lookup { filter: "f", key: "" },
            "400 with the reason"
        );
        assert_eq!(classify("GET", "/metrics"), Route::NotFound);
        assert_eq!(classify("GET", "/healthz"), Route::Health);
        assert_eq!(classify("GET", "/_bloomgate/isolate"), Route::Isolate);
        assert_eq!(classify("POST", "/_bloomgate/isolate"), Route::WriteNotAllowed);
        assert_eq!(classify("GET", "/_bloomgate/other"), Route::NotFound);
    }

    #[test]
    fn head_is_a_lookup_like_get() {
        assert_eq!(classify("HEAD", "/v1/filters/f/keys/abc"), Route::Lookup { filter: "f", key: "abc" });
        assert_eq!(classify("HEAD", "/healthz"), Route::Health);
        assert_eq!(classify("HEAD", "/v1/filters//keys/a"), Route::NotFound);
        assert_eq!(classify("HEAD", "/v1/filters/f/lookups"), Route::NotFound, "batch lookups are POST");
        assert_eq!(classify("HEAD", "/v1/filters/f/manifest"), Route::NotFound);
    }

    #[test]
    fn keys_stay_as_written_for_the_shared_decoder() {
        assert_eq!(classify("GET", "/v1/filters/f/keys/a%2Fb"), Route::Lookup { filter: "f", key: "a%2Fb" });
        assert_eq!(classify("GET", "/v1/filters/f/keys/%+1"), Route::Lookup { filter: "f", key: "%+1" });
        assert_eq!(classify("GET", "/v1/filters/f/keys/a/b"), Route::NotFound, "a key is one path segment");
    }
}
