//! Which requests the edge serves: lookups, the health check; writes get a 405 pointing at the
//! origin's write API; nothing else is forwarded.

/// What a request is.
#[derive(Debug, PartialEq, Eq)]
pub enum Route<'a> {
    /// `GET /healthz`.
    Health,
    /// `GET /v1/filters/{filter}/keys/{key}` (`key` still percent-encoded).
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
        ("GET", [filter, "keys", key]) if !filter.is_empty() && !key.is_empty() => Route::Lookup { filter, key },
        ("POST", [filter, "lookups"]) if !filter.is_empty() => Route::BatchLookup { filter },
        ("GET" | "HEAD", _) => Route::NotFound,
        (_, [_, "keys", key]) if !key.is_empty() => Route::WriteNotAllowed,
        (_, [_, "keys"] | [_] | [_, "lookups"]) => Route::WriteNotAllowed,
        _ => Route::NotFound,
    }
}

/// Decodes `%XX` escapes (keys arrive percent-encoded in the path). Returns None for a
/// malformed escape; the caller answers 400.
pub fn percent_decode(text: &str) -> Option<Vec<u8>> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes.get(i + 1..i + 3)?;
            let value = u8::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()?;
            out.push(value);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    Some(out)
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
        assert_eq!(classify("GET", "/v1/filters/f/keys/"), Route::NotFound);
        assert_eq!(classify("GET", "/metrics"), Route::NotFound);
        assert_eq!(classify("GET", "/healthz"), Route::Health);
    }

    #[test]
    fn percent_decoding() {
        assert_eq!(percent_decode("ab%20c").unwrap(), b"ab c");
        assert_eq!(percent_decode("%00").unwrap(), [0]);
        assert_eq!(percent_decode("%4"), None);
        assert_eq!(percent_decode("%zz"), None);
    }
}
