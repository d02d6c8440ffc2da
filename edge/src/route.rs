//! Which requests the edge serves: lookups, the health check; writes get a 405 pointing at the
//! origin's write API; nothing else is forwarded.

/// What a request is.
#[derive(Debug, PartialEq, Eq)]
pub enum Route<'a> {
    /// `GET /healthz`.
    Health,
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

/// Classifies a request by method and path (no query string).
pub fn classify<'a>(method: &str, path: &'a str) -> Route<'a> {
    if path == "/healthz" {
        return if method == "GET" || method == "HEAD" { Route::Health } else { Route::WriteNotAllowed };
    }
    let Some(rest) = path.strip_prefix("/v1/filters/") else {
        return Route::NotFound;
    };
    let parts: Vec<&str> = rest.split('/').collect();
    match (method, parts.as_slice()) {
        // HEAD is a GET without the body (the origin serves both from one route): a HEAD for a
        // stored key must find it, not fall through to "no route". An empty key is a lookup
        // too, refused by the decoder with the reason: the runtime's URL parser leaves it
        // empty when the client sent `.` or `%2e`.
        ("GET" | "HEAD", [filter, "keys", key]) if !filter.is_empty() => Route::Lookup { filter, key },
        ("POST", [filter, "lookups"]) if !filter.is_empty() => Route::BatchLookup { filter },
        ("GET" | "HEAD", _) => Route::NotFound,
        (_, [_, "keys", key]) if !key.is_empty() => Route::WriteNotAllowed,
        (_, [_, "keys"] | [_] | [_, "lookups"]) => Route::WriteNotAllowed,
        _ => Route::NotFound,
    }
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
