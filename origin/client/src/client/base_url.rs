//! The server's base URL, checked once when a client is built: `http` or `https`, a host, no
//! credentials, query or fragment. Every call appends its path to it, so a server behind a
//! path prefix (`https://host/bloomgate`) works as well as one at the root.

use super::Error;

/// `input` as the base every path is appended to (no trailing `/`), or why it cannot be one.
pub(super) fn parse(input: &str) -> Result<String, Error> {
    let refuse = |reason: &str| Error::InvalidUrl { url: input.to_owned(), reason: reason.to_owned() };
    // "localhost:8080" parses as a URL of scheme "localhost": ask for the scheme first.
    if !input.contains("://") {
        return Err(refuse("it has no scheme: write it as http://HOST:PORT or https://HOST:PORT"));
    }
    let url = reqwest::Url::parse(input).map_err(|e| refuse(&format!("{e}; write it as https://HOST:PORT")))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(refuse(&format!("the scheme is {}://; use http:// or https://", url.scheme())));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(refuse("it has no host; write it as https://HOST:PORT"));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(refuse("it carries credentials; pass a token with ClientBuilder::token instead"));
    }
    if url.query().is_some() {
        return Err(refuse("it has a query (?...); give the server's base URL only, such as https://HOST:PORT"));
    }
    if url.fragment().is_some() {
        return Err(refuse("it has a fragment (#...); give the server's base URL only, such as https://HOST:PORT"));
    }
    Ok(url.as_str().trim_end_matches('/').to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_and_https_bases_are_kept_without_a_trailing_slash() {
        assert_eq!(parse("http://127.0.0.1:8080").unwrap(), "http://127.0.0.1:8080");
        assert_eq!(parse("https://bloomgate.example.com/").unwrap(), "https://bloomgate.example.com");
        assert_eq!(parse("https://example.com/bloomgate/").unwrap(), "https://example.com/bloomgate");
        assert_eq!(parse("HTTPS://[::1]:8443").unwrap(), "https://[::1]:8443");
    }

    #[test]
    fn urls_that_cannot_name_a_server_say_how_to_write_one() {
        let cases = [
            ("127.0.0.1:8080", "no scheme"),
            ("localhost:8080", "no scheme"),
            ("", "no scheme"),
            ("ftp://example.com", "the scheme is ftp://"),
            ("file:///tmp/x", "the scheme is file://"),
            ("http://", "HOST:PORT"),
            ("https://user:secret@example.com", "credentials"),
            ("https://example.com/?filter=x", "query"),
            ("https://example.com/#top", "fragment"),
            ("https://exa mple.com", "HOST:PORT"),
        ];
        for (input, words) in cases {
            let err = parse(input).expect_err(input);
            assert!(matches!(err, Error::InvalidUrl { .. }), "{input}: {err:?}");
            let message = err.to_string();
            assert!(message.contains(words), "{input}: {message}");
            assert!(message.starts_with(&format!("invalid server URL {input:?}")), "{message}");
        }
    }
}
