//! Fuzzes the URL path key decoder the edge and the origin share: it never panics, every key it
//! accepts is one the API can hold and re-escapes to itself, and every refusal names a true
//! reason at the right position.

#![no_main]

use bloomgate_filter::{decode_path_key, PathKeyError, MAX_PATH_KEY_LEN};
use libfuzzer_sys::fuzz_target;

fn escape_all(key: &str) -> String {
    key.bytes().map(|b| format!("%{b:02X}")).collect()
}

fuzz_target!(|data: &[u8]| {
    let Ok(raw) = std::str::from_utf8(data) else {
        return;
    };
    match decode_path_key(raw) {
        Ok(key) => {
            assert!(!key.is_empty() && !key.contains('\0') && key != "." && key != "..");
            assert!(key.len() <= raw.len());
            if raw.len() <= MAX_PATH_KEY_LEN / 3 {
                assert_eq!(decode_path_key(&escape_all(&key)).as_ref(), Ok(&key));
            }
        }
        Err(PathKeyError::Empty) => assert!(raw.is_empty()),
        Err(PathKeyError::TooLong { len }) => assert!(len == raw.len() && len > MAX_PATH_KEY_LEN),
        Err(PathKeyError::BadEscape { position, found }) => {
            assert!(raw[position..].starts_with(&found) && found.starts_with('%'));
            let digits = &raw.as_bytes()[position + 1..];
            assert!(digits.len() < 2 || !digits[..2].iter().all(u8::is_ascii_hexdigit));
        }
        Err(PathKeyError::Nul { position }) => {
            assert!(raw[position..].starts_with("%00") || raw[position..].starts_with('\0'));
        }
        Err(PathKeyError::NotUtf8 { position }) => assert!(position < raw.len()),
        Err(PathKeyError::Unescaped { position, found }) => {
            assert!(raw[position..].starts_with(found));
            assert!(found == '\\' || found == ' ' || found.is_ascii_control());
        }
        Err(PathKeyError::DotSegment { key }) => {
            assert!(matches!(raw.to_ascii_lowercase().replace("%2e", ".").as_str(), "." | ".."), "{raw} {key}");
        }
    }
});
