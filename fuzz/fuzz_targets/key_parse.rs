//! Fuzzes key normalisation: the first byte picks a format (bytes, hex, hex:32, hex:64), the rest
//! is the key. Accepted keys must re-encode to the input (hex: lowercase hex of the output equals
//! the lowercased input); refused keys must be refused for a true reason.

#![no_main]

use bloomgate_filter::{KeyError, KeyFormat, MAX_KEY_BYTES};
use libfuzzer_sys::fuzz_target;

const FORMATS: [KeyFormat; 4] = [
    KeyFormat::Bytes,
    KeyFormat::Hex { digits: None },
    KeyFormat::Hex { digits: Some(32) },
    KeyFormat::Hex { digits: Some(64) },
];

fn lower_hex(bytes: &[u8]) -> Vec<u8> {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    bytes.iter().flat_map(|b| [DIGITS[usize::from(b >> 4)], DIGITS[usize::from(b & 15)]]).collect()
}

fuzz_target!(|data: &[u8]| {
    let Some((&selector, raw)) = data.split_first() else {
        return;
    };
    let format = FORMATS[usize::from(selector % 4)];
    let result = format.normalize(raw);

    // The allocation-free path agrees with the allocating one.
    let mut buf = [0u8; MAX_KEY_BYTES];
    match (&result, format.normalize_into(raw, &mut buf)) {
        (Ok(out), Ok(len)) => assert_eq!(&buf[..len], &out[..]),
        (Err(a), Err(b)) => assert_eq!(a, &b),
        (a, b) => panic!("normalize {a:?} but normalize_into {b:?}"),
    }

    match (format, result) {
        (KeyFormat::Bytes, Ok(out)) => assert_eq!(out, raw),
        (KeyFormat::Hex { digits }, Ok(out)) => {
            assert_eq!(lower_hex(&out), raw.to_ascii_lowercase());
            if let Some(d) = digits {
                assert_eq!(out.len() * 2, usize::from(d));
            }
        }
        (_, Err(KeyError::Empty)) => assert!(raw.is_empty()),
        (_, Err(KeyError::TooLong { max, len })) => {
            assert_eq!(len, raw.len());
            assert!(len > max);
        }
        (KeyFormat::Hex { digits: Some(d) }, Err(KeyError::WrongHexLength { expected, got })) => {
            assert_eq!((expected, got), (d, raw.len()));
            assert_ne!(got, usize::from(d));
        }
        (KeyFormat::Hex { digits: None }, Err(KeyError::OddHexLength { got })) => {
            assert_eq!(got, raw.len());
            assert_eq!(got % 2, 1);
        }
        (KeyFormat::Hex { .. }, Err(KeyError::NotHex { position, byte })) => {
            assert_eq!(raw[position], byte);
            assert!(!byte.is_ascii_hexdigit());
            // The first offending byte is the one reported.
            assert!(raw[..position].iter().all(u8::is_ascii_hexdigit));
        }
        (format, Err(e)) => panic!("{format} refused {raw:?} with an error it cannot give: {e:?}"),
    }
});
