#![doc = include_str!("../README.md")]
#![cfg_attr(not(feature = "std"), no_std)]

extern crate alloc;

mod advance;
pub mod block;
pub mod feed_current;
pub mod filter;
pub mod hash;
pub mod journal;
pub mod key;
mod le;
pub mod manifest;
mod memory;
mod pages;
pub mod params;
pub mod path_key;
pub mod sealed_chunk;
pub mod sealed_page;
pub mod segment;
pub mod segment_run;

pub use filter::{AllocError, BloomFilter};
pub use hash::{hash_key, KeyHash};
pub use journal::{decode_journal, encode_journal, JournalError, JournalPosition, JournalView};
pub use key::{KeyError, KeyFormat, MAX_KEY_BYTES};
pub use manifest::{validate_filter_name, FilterNameError, Manifest, ManifestError, MANIFEST_FORMAT};
pub use params::{Location, Params, ParamsError, SizingOptions};
pub use path_key::{decode_path_key, decode_path_key_borrowed, PathKeyError, MAX_PATH_KEY_LEN};
pub use segment::{
    decode_segment, encode_segment, encode_segment_at, Segment, SegmentError, SegmentHeader, SegmentView, WrongSegment,
};
pub use segment_run::{segment_runs, SegmentRun};
