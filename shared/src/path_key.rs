//! Keys in URL paths: the one decoding of a `%XX`-escaped path segment into a key, used by
//! the edge and the origin alike, so both read a URL as the same key (or both refuse it).
//!
//! Lenient decoders disagree on malformed input: one turns `%+1` into byte 0x01
//! (`u8::from_str_radix` accepts a sign), another keeps it as the three characters `%+1`; one
//! accepts `%ff`, another refuses non-UTF-8. Any such disagreement lets the edge answer "not
//! seen" for a key the origin stored under another spelling. So this decoder is strict: every
//! `%` starts exactly two ASCII hex digits, and the result must be a key the origin's API can
//! hold (UTF-8 text without NUL), or the URL is refused with the reason.
//!
//! What a standard URL parser (browsers, `fetch`, the Workers runtime in front of the edge)
//! would change before a server sees the path is refused rather than guessed at: keys `.` and
//! `..` (it removes those segments, `%2e`-escaped or not; the batch lookup API, with JSON keys,
//! carries them), and a literal `\`, space or control character (it reads `\` as `/`, and
//! drops or trims the others); written as `%5C`, `%20`, … they arrive intact.

use crate::key::{hex_value, MAX_KEY_BYTES};
use alloc::borrow::Cow;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

/// The longest raw path segment accepted: the longest key ([`MAX_KEY_BYTES`]) with every byte
/// written as a three-character `%XX` escape. Longer input is refused before any allocation.
pub const MAX_PATH_KEY_LEN: usize = 3 * MAX_KEY_BYTES;

/// Why a path segment is not a key. Positions count bytes of the segment as written in the
/// URL, from 0. The `Display` text is written for the person who sent the URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PathKeyError {
    /// The segment is empty.
    Empty,
    /// The segment is longer than [`MAX_PATH_KEY_LEN`].
    TooLong {
        /// Length received, in bytes as written in the URL.
        len: usize,
    },
    /// A `%` not followed by two hex digits.
    BadEscape {
        /// Position of the `%`.
        position: usize,
        /// The `%` and up to two characters after it, as written.
        found: String,
    },
    /// The decoded key is not valid UTF-8.
    NotUtf8 {
        /// Position of the escape or character where the invalid sequence starts.
        position: usize,
    },
    /// The key contains NUL (`%00`).
    Nul {
        /// Position of the `%00`.
        position: usize,
    },
    /// A character that URL parsers change (`\` to `/`) or drop (space, control characters)
    /// was not `%`-escaped.
    Unescaped {
        /// Its position.
        position: usize,
        /// The character.
        found: char,
    },
    /// The key is `.` or `..`, which URL parsers remove from paths.
    DotSegment {
        /// The key, `.` or `..`.
        key: &'static str,
    },
}

impl fmt::Display for PathKeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Empty => f.write_str(
                "key must not be empty (a key '.' sent in a URL arrives empty: URL parsers remove '.' \
                 and '..' path segments; look such keys up with POST /v1/filters/{filter}/lookups)",
            ),
            Self::TooLong { len } => write!(
                f,
                "key is {len} bytes as written in the URL; at most {MAX_PATH_KEY_LEN} are accepted \
                 (a {MAX_KEY_BYTES}-byte key with every byte %-escaped): escape only what needs it \
                 ('%', '/', '?', '#', spaces, non-ASCII)"
            ),
            Self::BadEscape { position, found } => write!(
                f,
                "key has a malformed %-escape {found:?} at position {position}: every '%' must be \
                 followed by two hex digits (write a literal '%' as %25)"
            ),
            Self::NotUtf8 { position } => write!(
                f,
                "key is not valid UTF-8 once %-decoded (at position {position}): keys in a URL are \
                 text, so escape each UTF-8 byte (e.g. 'é' as %C3%A9); use a hex key format for binary keys"
            ),
            Self::Unescaped { position, found } => write!(
                f,
                "key has an unescaped {found:?} at position {position}: URL parsers read '\\' as '/' and drop \
                 spaces and control characters, so write it as %{:02X}",
                u32::from(*found)
            ),
            Self::Nul { position } => {
                write!(f, "key must not contain NUL (%00), found at position {position}")
            }
            Self::DotSegment { key } => write!(
                f,
                "key {key:?} cannot be sent in a URL path: URL parsers remove '{key}' path segments \
                 (escaped as %2e or not) before the server sees them; look it up with \
                 POST /v1/filters/{{filter}}/lookups and a JSON body {{\"keys\":[{key:?}]}}"
            ),
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for PathKeyError {}

/// Decodes a key from its URL path segment, exactly as written (still `%`-escaped).
///
/// Strict where other decoders guess: every `%` must start exactly two ASCII hex digits
/// (`%+1`, `%4` and `%zz` are refused, not kept or half-read), and the key must be non-empty,
/// valid UTF-8, free of NUL, and not `.` or `..`; `\`, space and control characters must come
/// `%`-escaped. Other characters are taken as they are; `+` stays `+` (paths are not form
/// data). Allocates at most [`MAX_PATH_KEY_LEN`] bytes.
///
/// ```
/// use bloomgate_filter::{decode_path_key, PathKeyError};
///
/// assert_eq!(decode_path_key("caf%C3%A9+a%2Fb").unwrap(), "café+a/b");
/// assert!(matches!(decode_path_key("%+1"), Err(PathKeyError::BadEscape { position: 0, .. })));
/// assert_eq!(decode_path_key("%2E%2e"), Err(PathKeyError::DotSegment { key: ".." }));
/// ```
pub fn decode_path_key(raw: &str) -> Result<String, PathKeyError> {
    let bytes = raw.as_bytes();
    if bytes.len() > MAX_PATH_KEY_LEN {
        return Err(PathKeyError::TooLong { len: bytes.len() });
    }
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let (byte, width) = match bytes[i] {
            b'%' => (escape_at(raw, i)?, 3),
            0 => return Err(PathKeyError::Nul { position: i }),
            literal if must_escape(literal) => {
                return Err(PathKeyError::Unescaped { position: i, found: char::from(literal) })
            }
            literal => (literal, 1),
        };
        if byte == 0 {
            return Err(PathKeyError::Nul { position: i });
        }
        out.push(byte);
        i += width;
    }
    let key = String::from_utf8(out)
        .map_err(|e| PathKeyError::NotUtf8 { position: raw_position(bytes, e.utf8_error().valid_up_to()) })?;
    match key.as_str() {
        "" => Err(PathKeyError::Empty),
        "." => Err(PathKeyError::DotSegment { key: "." }),
        ".." => Err(PathKeyError::DotSegment { key: ".." }),
        _ => Ok(key),
    }
}

/// [`decode_path_key`], borrowing `raw` when it has no `%`: such a segment is the key itself,
/// so it is only checked, and nothing is allocated.
pub fn decode_path_key_borrowed(raw: &str) -> Result<Cow<'_, str>, PathKeyError> {
    if raw.contains('%') {
        return decode_path_key(raw).map(Cow::Owned);
    }
    if raw.len() > MAX_PATH_KEY_LEN {
        return Err(PathKeyError::TooLong { len: raw.len() });
    }
    // What the decoding loop refuses in a segment without escapes, in the same order.
    for (position, &byte) in raw.as_bytes().iter().enumerate() {
        if byte == 0 {
            return Err(PathKeyError::Nul { position });
        }
        if must_escape(byte) {
            return Err(PathKeyError::Unescaped { position, found: char::from(byte) });
        }
    }
    match raw {
        "" => Err(PathKeyError::Empty),
        "." => Err(PathKeyError::DotSegment { key: "." }),
        ".." => Err(PathKeyError::DotSegment { key: ".." }),
        _ => Ok(Cow::Borrowed(raw)),
    }
}

/// Whether an ASCII character must arrive `%`-escaped: one a URL parser changes (`\` is `/` in
/// http(s) URLs) or drops (tab and line breaks anywhere, spaces and controls at the end).
fn must_escape(byte: u8) -> bool {
    byte == b'\\' || byte == b' ' || byte.is_ascii_control()
}

/// The byte of the `%XX` escape at `at`, or why it is not one.
fn escape_at(raw: &str, at: usize) -> Result<u8, PathKeyError> {
    let digits = raw.as_bytes().get(at + 1..at + 3);
    let value = digits.and_then(|d| Some((hex_value(d[0])? << 4) | hex_value(d[1])?));
    value.ok_or_else(|| PathKeyError::BadEscape { position: at, found: raw[at..].chars().take(3).collect() })
}

/// Where the `decoded`-th decoded byte was written in the raw segment (which was well-formed).
fn raw_position(raw: &[u8], decoded: usize) -> usize {
    let mut at = 0;
    for _ in 0..decoded {
        at += if raw[at] == b'%' { 3 } else { 1 };
    }
    at
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::format;
    use alloc::string::ToString;
    use proptest::prelude::*;

    fn bad_escape(position: usize, found: &str) -> Result<String, PathKeyError> {
        Err(PathKeyError::BadEscape { position, found: found.into() })
    }

    #[test]
    fn escapes_are_exactly_percent_and_two_hex_digits() {
        assert_eq!(decode_path_key("ab%20c").unwrap(), "ab c");
        assert_eq!(decode_path_key("%7e%7E~").unwrap(), "~~~");
        assert_eq!(decode_path_key("%25").unwrap(), "%");
        assert_eq!(decode_path_key("%2541").unwrap(), "%41", "decoded once, never twice");
        assert_eq!(decode_path_key("%+1"), bad_escape(0, "%+1"), "a sign is not a hex digit");
        assert_eq!(decode_path_key("%-1"), bad_escape(0, "%-1"));
        assert_eq!(decode_path_key("ab%4"), bad_escape(2, "%4"));
        assert_eq!(decode_path_key("%zz"), bad_escape(0, "%zz"));
        assert_eq!(decode_path_key("a%"), bad_escape(1, "%"));
        assert_eq!(decode_path_key("%%41"), bad_escape(0, "%%4"));
        assert_eq!(decode_path_key("%4é"), bad_escape(0, "%4é"), "the shown text is cut at a character boundary");
        assert_eq!(decode_path_key("%\u{663}\u{663}"), bad_escape(0, "%\u{663}\u{663}"), "only ASCII digits");
    }

    #[test]
    fn other_characters_are_taken_as_written() {
        for (raw, key) in [("+", "+"), ("a;b", "a;b"), ("a%2Fb", "a/b"), ("%3F", "?"), ("a%2eb", "a.b"), ("é", "é")] {
            assert_eq!(decode_path_key(raw).unwrap(), key, "{raw}");
        }
        assert_eq!(decode_path_key("%C3%A9").unwrap(), "é");
        assert_eq!(decode_path_key("..."), Ok("...".into()), "only '.' and '..' are dot segments");
    }

    #[test]
    fn keys_the_api_cannot_hold_are_refused() {
        assert_eq!(decode_path_key(""), Err(PathKeyError::Empty));
        assert_eq!(decode_path_key("ab%00"), Err(PathKeyError::Nul { position: 2 }));
        assert_eq!(decode_path_key("a\0"), Err(PathKeyError::Nul { position: 1 }));
        assert_eq!(decode_path_key("a\\b"), Err(PathKeyError::Unescaped { position: 1, found: '\\' }));
        for c in [' ', '\t', '\n', '\r', '\u{1}', '\u{7f}'] {
            assert_eq!(decode_path_key(&format!("ab{c}")), Err(PathKeyError::Unescaped { position: 2, found: c }));
        }
        assert_eq!(decode_path_key("a%5Cb%20%09").unwrap(), "a\\b \t", "escaped, they are fine");
        assert_eq!(decode_path_key("%ff"), Err(PathKeyError::NotUtf8 { position: 0 }));
        assert_eq!(decode_path_key("a%C3"), Err(PathKeyError::NotUtf8 { position: 1 }), "a truncated sequence");
        assert_eq!(decode_path_key("ab%C3(x"), Err(PathKeyError::NotUtf8 { position: 2 }));
        assert_eq!(decode_path_key("é%ff"), Err(PathKeyError::NotUtf8 { position: 2 }));
        for (raw, key) in [(".", "."), ("%2e", "."), ("%2E", "."), ("..", ".."), ("%2E%2e", ".."), (".%2e", "..")] {
            assert_eq!(decode_path_key(raw), Err(PathKeyError::DotSegment { key }), "{raw}");
        }
    }

    #[test]
    fn length_is_bounded_before_decoding() {
        let longest = "a".repeat(MAX_PATH_KEY_LEN);
        assert_eq!(decode_path_key(&longest).unwrap().len(), MAX_PATH_KEY_LEN);
        let all_escaped = "%41".repeat(MAX_KEY_BYTES);
        assert_eq!(decode_path_key(&all_escaped).unwrap(), "A".repeat(MAX_KEY_BYTES));
        let over = "%zz".repeat(MAX_KEY_BYTES + 1);
        assert_eq!(decode_path_key(&over), Err(PathKeyError::TooLong { len: MAX_PATH_KEY_LEN + 3 }));
    }

    #[test]
    fn messages_say_what_to_do() {
        let text = |raw: &str| decode_path_key(raw).unwrap_err().to_string();
        assert_eq!(
            text("a%+1"),
            "key has a malformed %-escape \"%+1\" at position 1: every '%' must be followed by two hex digits (write a literal '%' as %25)"
        );
        assert_eq!(text("%00"), "key must not contain NUL (%00), found at position 0");
        assert_eq!(
            text("a\\b"),
            "key has an unescaped '\\\\' at position 1: URL parsers read '\\' as '/' and drop spaces and control characters, so write it as %5C"
        );
        assert!(text("a b").ends_with("so write it as %20"), "{}", text("a b"));
        assert!(text("%ff").contains("%C3%A9"), "{}", text("%ff"));
        let dots = text("%2e%2E");
        assert!(dots.starts_with("key \"..\" cannot be sent in a URL path"), "{dots}");
        assert!(dots.contains(r#"POST /v1/filters/{filter}/lookups and a JSON body {"keys":[".."]}"#), "{dots}");
        let long = text(&"a".repeat(MAX_PATH_KEY_LEN + 1));
        assert!(long.starts_with("key is 3073 bytes as written in the URL; at most 3072 are accepted"), "{long}");
    }

    /// `key` written with each character either as it is or as `%XX` escapes of its UTF-8
    /// bytes (upper or lower case hex), as `plan` says; `%` and what [`must_escape`] names are
    /// always escaped.
    fn encode(key: &str, plan: &[u8]) -> String {
        let mut out = String::new();
        for (c, how) in key.chars().zip(plan.iter().cycle()) {
            if c == '%' || (c.is_ascii() && must_escape(c as u8)) || how % 3 != 0 {
                let mut buf = [0u8; 4];
                for b in c.encode_utf8(&mut buf).bytes() {
                    out.push_str(&if how % 3 == 1 { format!("%{b:02X}") } else { format!("%{b:02x}") });
                }
            } else {
                out.push(c);
            }
        }
        out
    }

    proptest! {
        #[test]
        fn decoding_borrowed_reads_every_segment_as_decoding_alone_does(
            raw in r"[a-zA-Z0-9%. \\\x00-\x1f\x7f\u{e9}\u{2603}+/-]{0,12}"
        ) {
            let borrowed = decode_path_key_borrowed(&raw);
            if let Ok(Cow::Borrowed(key)) = &borrowed {
                prop_assert!(std::ptr::eq(*key, raw.as_str()), "borrowed is the segment itself");
            }
            prop_assert_eq!(borrowed.map(Cow::into_owned), decode_path_key(&raw));
        }

        #[test]
        fn every_key_round_trips_in_any_mix_of_escaped_and_literal(
            key in "[^\u{0}]{1,48}",
            plan in proptest::collection::vec(any::<u8>(), 1..16),
        ) {
            prop_assume!(key != "." && key != "..");
            prop_assert_eq!(decode_path_key(&encode(&key, &plan)), Ok(key.clone()));
            prop_assert_eq!(decode_path_key(&encode(&key, &[1])), Ok(key));
        }

        #[test]
        fn arbitrary_input_never_panics_and_a_key_is_always_usable(raw in any::<String>(), near in "[%0-9a-fA-F+.\u{e9}]{0,24}") {
            for raw in [raw, near] {
                if let Ok(key) = decode_path_key(&raw) {
                    prop_assert!(!key.is_empty() && !key.contains('\0') && key != "." && key != "..");
                    prop_assert!(key.len() <= raw.len());
                    // Escaping the result in full gives the same key back.
                    prop_assert_eq!(decode_path_key(&encode(&key, &[1])), Ok(key));
                }
            }
        }
    }
}
