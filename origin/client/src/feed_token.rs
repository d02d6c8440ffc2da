//! The path token of the shared feed: a shared cache keys on the URL and ignores headers, so
//! sealed chunks cannot be kept private by the edge secret's header. The secret instead derives
//! a token per (filter, generation) that the URL carries: an HMAC-SHA256 of both under the
//! secret, its first 16 bytes in hex. Whoever can read the URL can read the chunk, exactly as
//! whoever holds the secret can; no one else can name one. The origin checks it in constant
//! time and answers a wrong or missing token like an unknown path (404). The filter's current
//! document, asked for before the generation is known, is under generation 0's token
//! ([`CURRENT_GENERATION`]: no generation is numbered 0).

/// The generation whose token the filter's current document is under.
pub const CURRENT_GENERATION: u64 = 0;

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// Bytes of the MAC the token carries.
pub const TOKEN_BYTES: usize = 16;

/// What the MAC is over, so a token for one purpose is never one for another.
const CONTEXT: &[u8] = b"bloomgate feed token 1\0";

fn mac(secret: &[u8], filter: &str, generation: u64) -> Hmac<Sha256> {
    // HMAC takes a key of any length: `new_from_slice` cannot fail for it.
    let mut mac =
        Hmac::<Sha256>::new_from_slice(secret).unwrap_or_else(|_| unreachable!("HMAC accepts any key length"));
    mac.update(CONTEXT);
    mac.update(filter.as_bytes());
    mac.update(b"\0");
    mac.update(&generation.to_le_bytes());
    mac
}

/// The token of `filter`'s generation `generation` under the edge secret.
pub fn feed_token(secret: &[u8], filter: &str, generation: u64) -> String {
    let tag = mac(secret, filter, generation).finalize().into_bytes();
    tag[..TOKEN_BYTES].iter().map(|b| format!("{b:02x}")).collect()
}

/// Whether `token` is that token, compared in constant time (its length is not secret).
pub fn feed_token_matches(secret: &[u8], filter: &str, generation: u64, token: &str) -> bool {
    let Some(bytes) = decode_hex(token).filter(|b| b.len() == TOKEN_BYTES) else { return false };
    mac(secret, filter, generation).verify_truncated_left(&bytes).is_ok()
}

fn decode_hex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len()).step_by(2).map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_names_one_filter_generation_under_one_secret() {
        let token = feed_token(b"secret", "users", 17);
        assert_eq!(token.len(), 2 * TOKEN_BYTES);
        assert!(feed_token_matches(b"secret", "users", 17, &token));
        assert!(!feed_token_matches(b"secret", "users", 18, &token), "another generation");
        assert!(!feed_token_matches(b"secret", "users2", 17, &token), "another filter");
        assert!(!feed_token_matches(b"other", "users", 17, &token), "another secret");
        // The separator keeps ("ab", 1) and ("a", ...) apart.
        assert_ne!(feed_token(b"s", "ab", 1), feed_token(b"s", "a", 1));
    }

    #[test]
    fn malformed_tokens_are_refused() {
        let token = feed_token(b"secret", "users", 17);
        for bad in ["", &token[..30], &format!("{token}00"), &token.replace(&token[..2], "zz"), "é"] {
            assert!(!feed_token_matches(b"secret", "users", 17, bad), "{bad:?}");
        }
    }
}
