//! Fuzzes the decoding of a sealed journal chunk's page: whatever the bytes, decoding returns
//! a view or an error and never panics; a page it accepts re-encodes to the same bytes, so the
//! view holds nothing the bytes do not say.

#![no_main]

use bloomgate_filter::sealed_page::{decode_page, encode_page};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(view) = decode_page(data) {
        let hashes: Vec<_> = view.hashes().collect();
        assert_eq!(hashes.len(), view.len());
        assert_eq!(encode_page(&view.header, &hashes), data, "an accepted page re-encodes to its bytes");
    }
});
