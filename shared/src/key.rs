//! Key formats and normalisation: the one place that decides which bytes a key hashes as.
//!
//! A filter stores keys in one [`KeyFormat`]. Parsing turns what a client sent into the
//! *normalised* bytes that are hashed and stored, so `ABCD` and `abcd` in a hex filter are the
//! same key with the same bits, on every target.

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;
use core::str::FromStr;

/// The longest key, in normalised bytes. Bounds every allocation made for a key.
pub const MAX_KEY_BYTES: usize = 1024;

/// How a filter's keys are written by clients and normalised before hashing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KeyFormat {
    /// Hex digits, case-insensitive, normalised to the decoded bytes. `digits` fixes the length
    /// (32 for MD5, 40 for SHA-1, 64 for SHA-256); `None` accepts any even length up to
    /// `2 * MAX_KEY_BYTES`.
    Hex {
        /// Required number of hex digits, if fixed.
        digits: Option<u16>,
    },
    /// Any bytes, 1..=[`MAX_KEY_BYTES`] long, hashed as given.
    Bytes,
}

/// Why a key was refused. The `Display` text is written for the person who sent the key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeyError {
    /// The key was empty.
    Empty,
    /// The key is longer than the format allows (`len` is in input bytes).
    TooLong {
        /// Longest accepted length, in input bytes.
        max: usize,
        /// Length received, in input bytes.
        len: usize,
    },
    /// A fixed-length hex format received another number of digits.
    WrongHexLength {
        /// Digits the format requires.
        expected: u16,
        /// Digits received.
        got: usize,
    },
    /// A variable-length hex key had an odd number of digits.
    OddHexLength {
        /// Digits received.
        got: usize,
    },
    /// A character that is not a hex digit.
    NotHex {
        /// Zero-based position of the offending byte.
        position: usize,
        /// The offending byte.
        byte: u8,
    },
}

impl fmt::Display for KeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyError::Empty => f.write_str("key must not be empty"),
            KeyError::TooLong { max, len } => {
                write!(f, "key must be at most {max} bytes, got {len}")
            }
            KeyError::WrongHexLength { expected, got } => {
                write!(f, "key must be {expected} hex digits, got {got}")
            }
            KeyError::OddHexLength { got } => {
                write!(f, "key must have an even number of hex digits, got {got}")
            }
            KeyError::NotHex { position, byte } => {
                if byte.is_ascii_graphic() {
                    write!(f, "key must be hex digits (0-9, a-f), found {:?} at position {position}", *byte as char)
                } else {
                    write!(f, "key must be hex digits (0-9, a-f), found byte 0x{byte:02x} at position {position}")
                }
            }
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for KeyError {}

impl KeyFormat {
    /// SHA-256 digests written as 64 hex digits: the default for new filters.
    pub const SHA256_HEX: KeyFormat = KeyFormat::Hex { digits: Some(64) };

    /// Checks `raw` against the format and returns the normalised bytes to hash and store.
    ///
    /// Allocates at most [`MAX_KEY_BYTES`], whatever `raw`'s length: an over-long key is
    /// refused before any allocation.
    pub fn normalize(&self, raw: &[u8]) -> Result<Vec<u8>, KeyError> {
        let mut out = [0u8; MAX_KEY_BYTES];
        let len = self.normalize_into(raw, &mut out)?;
        Ok(out[..len].to_vec())
    }

    /// Like [`normalize`](Self::normalize) but writes into a caller's buffer and returns the
    /// length, for hot paths that must not allocate.
    pub fn normalize_into(&self, raw: &[u8], out: &mut [u8; MAX_KEY_BYTES]) -> Result<usize, KeyError> {
        if raw.is_empty() {
            return Err(KeyError::Empty);
        }
        match *self {
            KeyFormat::Bytes => {
                if raw.len() > MAX_KEY_BYTES {
                    return Err(KeyError::TooLong { max: MAX_KEY_BYTES, len: raw.len() });
                }
                out[..raw.len()].copy_from_slice(raw);
                Ok(raw.len())
            }
            KeyFormat::Hex { digits } => {
                match digits {
                    Some(expected) if raw.len() != usize::from(expected) => {
                        return Err(KeyError::WrongHexLength { expected, got: raw.len() });
                    }
                    Some(_) => {}
                    None if raw.len() > 2 * MAX_KEY_BYTES => {
                        return Err(KeyError::TooLong { max: 2 * MAX_KEY_BYTES, len: raw.len() });
                    }
                    None if !raw.len().is_multiple_of(2) => {
                        return Err(KeyError::OddHexLength { got: raw.len() });
                    }
                    None => {}
                }
                decode_hex(raw, out)
            }
        }
    }

    /// The largest input length a client may send for this format, in bytes. Lets HTTP layers
    /// refuse an over-long path segment before reading it whole.
    pub fn max_input_len(&self) -> usize {
        match *self {
            KeyFormat::Bytes => MAX_KEY_BYTES,
            KeyFormat::Hex { digits: Some(d) } => usize::from(d),
            KeyFormat::Hex { digits: None } => 2 * MAX_KEY_BYTES,
        }
    }
}

/// Each byte's value as a hex digit, or [`NOT_HEX`]: made at compile time from [`hex_value`], so
/// the table and every other decoder in the crate agree.
const HEX_TABLE: [u8; 256] = {
    let mut table = [NOT_HEX; 256];
    let mut byte = 0;
    while byte < 256 {
        if let Some(value) = hex_value(byte as u8) {
            table[byte] = value;
        }
        byte += 1;
    }
    table
};

/// A table entry for a byte that is no hex digit: the one bit no digit's value (0 to 15) has.
const NOT_HEX: u8 = 0x10;

fn decode_hex(raw: &[u8], out: &mut [u8; MAX_KEY_BYTES]) -> Result<usize, KeyError> {
    // Callers checked the length is even and at most 2 * MAX_KEY_BYTES. Every lookup decodes
    // its key here: no branch per digit, one check at the end, and the error's position looked
    // for only when there is one.
    let mut seen = 0u8;
    for (byte, pair) in out.iter_mut().zip(raw.chunks_exact(2)) {
        let (hi, lo) = (HEX_TABLE[usize::from(pair[0])], HEX_TABLE[usize::from(pair[1])]);
        seen |= hi | lo;
        *byte = (hi << 4) | (lo & 0x0f);
    }
    if seen & NOT_HEX != 0 {
        return Err(first_not_hex(raw));
    }
    Ok(raw.len() / 2)
}

/// The error naming the first byte of `raw` that is no hex digit (there is one).
#[cold]
fn first_not_hex(raw: &[u8]) -> KeyError {
    let position = raw.iter().position(|&b| hex_value(b).is_none()).unwrap_or(0);
    KeyError::NotHex { position, byte: raw.get(position).copied().unwrap_or(0) }
}

/// The value of one ASCII hex digit, either case; None for anything else (no signs, no
/// non-ASCII digits), so every decoder in the crate agrees on what a hex digit is.
pub(crate) const fn hex_value(byte: u8) -> Option<u8> {
    match byte {
        b'0'..=b'9' => Some(byte - b'0'),
        b'a'..=b'f' => Some(byte - b'a' + 10),
        b'A'..=b'F' => Some(byte - b'A' + 10),
        _ => None,
    }
}

/// Why a key-format name was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyFormatParseError(String);

impl fmt::Display for KeyFormatParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown key format {:?}: use \"bytes\", \"hex\", or \"hex:N\" with N an even number of digits from 2 to {} (e.g. \"hex:64\" for SHA-256)",
            self.0,
            2 * MAX_KEY_BYTES
        )
    }
}

#[cfg(feature = "std")]
impl std::error::Error for KeyFormatParseError {}

impl FromStr for KeyFormat {
    type Err = KeyFormatParseError;

    /// Accepts `bytes`, `hex`, `hex:N`, and the digest aliases `md5`, `sha1`, `sha256`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let refuse = || KeyFormatParseError(String::from(s));
        match s {
            "bytes" => Ok(KeyFormat::Bytes),
            "hex" => Ok(KeyFormat::Hex { digits: None }),
            "md5" => Ok(KeyFormat::Hex { digits: Some(32) }),
            "sha1" => Ok(KeyFormat::Hex { digits: Some(40) }),
            "sha256" => Ok(KeyFormat::SHA256_HEX),
            _ => {
                let digits: u16 = s.strip_prefix("hex:").and_then(|n| n.parse().ok()).ok_or_else(refuse)?;
                let valid = digits >= 2 && digits.is_multiple_of(2) && usize::from(digits) <= 2 * MAX_KEY_BYTES;
                if valid {
                    Ok(KeyFormat::Hex { digits: Some(digits) })
                } else {
                    Err(refuse())
                }
            }
        }
    }
}

impl fmt::Display for KeyFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyFormat::Bytes => f.write_str("bytes"),
            KeyFormat::Hex { digits: None } => f.write_str("hex"),
            KeyFormat::Hex { digits: Some(d) } => write!(f, "hex:{d}"),
        }
    }
}

impl serde::Serialize for KeyFormat {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for KeyFormat {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text: alloc::borrow::Cow<'de, str> = serde::Deserialize::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString;
    use proptest::prelude::*;

    /// The decoder before the table: one digit at a time, the first bad one refused.
    fn decode_hex_digit_by_digit(raw: &[u8], out: &mut [u8; MAX_KEY_BYTES]) -> Result<usize, KeyError> {
        for (i, pair) in raw.chunks_exact(2).enumerate() {
            let hi = hex_value(pair[0]).ok_or(KeyError::NotHex { position: 2 * i, byte: pair[0] })?;
            let lo = hex_value(pair[1]).ok_or(KeyError::NotHex { position: 2 * i + 1, byte: pair[1] })?;
            out[i] = (hi << 4) | lo;
        }
        Ok(raw.len() / 2)
    }

    proptest! {
        #[test]
        fn the_table_decodes_and_refuses_as_digit_by_digit_did(
            raw in proptest::collection::vec(
                prop_oneof![8 => proptest::sample::select(b"0123456789abcdefABCDEF".to_vec()), 1 => any::<u8>()],
                0..40,
            ).prop_map(|mut v| { v.truncate(v.len() / 2 * 2); v })
        ) {
            let (mut fast, mut slow) = ([0u8; MAX_KEY_BYTES], [0u8; MAX_KEY_BYTES]);
            let (got, want) = (decode_hex(&raw, &mut fast), decode_hex_digit_by_digit(&raw, &mut slow));
            prop_assert_eq!(&got, &want);
            if let Ok(len) = got {
                prop_assert_eq!(&fast[..len], &slow[..len]);
            }
        }
    }

    #[test]
    fn hex_is_case_insensitive_and_decoded() {
        let f = KeyFormat::Hex { digits: Some(8) };
        assert_eq!(f.normalize(b"DEADbeef").unwrap(), [0xde, 0xad, 0xbe, 0xef]);
        assert_eq!(f.normalize(b"deadbeef").unwrap(), f.normalize(b"DEADBEEF").unwrap());
    }

    #[test]
    fn fixed_hex_length_error_names_both_lengths() {
        let key = [b'a'; 63];
        let err = KeyFormat::SHA256_HEX.normalize(&key).unwrap_err();
        assert_eq!(err.to_string(), "key must be 64 hex digits, got 63");
    }

    #[test]
    fn each_rejection_path_has_its_own_error() {
        let hex = KeyFormat::Hex { digits: None };
        assert_eq!(hex.normalize(b""), Err(KeyError::Empty));
        assert_eq!(KeyFormat::Bytes.normalize(b""), Err(KeyError::Empty));
        assert_eq!(hex.normalize(b"abc"), Err(KeyError::OddHexLength { got: 3 }));
        assert_eq!(hex.normalize(b"ag"), Err(KeyError::NotHex { position: 1, byte: b'g' }));
        assert_eq!(hex.normalize(b"\0a"), Err(KeyError::NotHex { position: 0, byte: 0 }));
        let long = alloc::vec![b'a'; 2 * MAX_KEY_BYTES + 2];
        assert_eq!(hex.normalize(&long), Err(KeyError::TooLong { max: 2048, len: 2050 }));
        let long = alloc::vec![7u8; MAX_KEY_BYTES + 1];
        assert_eq!(KeyFormat::Bytes.normalize(&long), Err(KeyError::TooLong { max: 1024, len: 1025 }));
        assert!(KeyFormat::Bytes.normalize(&long[..MAX_KEY_BYTES]).is_ok());
    }

    #[test]
    fn not_hex_message_shows_unprintable_bytes_as_hex() {
        let err = KeyFormat::Hex { digits: None }.normalize(b"a\0").unwrap_err();
        assert_eq!(err.to_string(), "key must be hex digits (0-9, a-f), found byte 0x00 at position 1");
    }

    #[test]
    fn format_names_round_trip() {
        for name in ["bytes", "hex", "hex:32", "hex:64", "hex:2048"] {
            let f: KeyFormat = name.parse().unwrap();
            assert_eq!(f.to_string(), name);
            let json = serde_json::to_string(&f).unwrap();
            assert_eq!(serde_json::from_str::<KeyFormat>(&json).unwrap(), f);
        }
        assert_eq!("sha256".parse::<KeyFormat>().unwrap(), KeyFormat::SHA256_HEX);
        for bad in ["", "hex:0", "hex:3", "hex:2050", "hex:x", "base64"] {
            assert!(bad.parse::<KeyFormat>().is_err(), "{bad} should be refused");
        }
    }
}
