//! Wall-clock time as the origin records it: milliseconds since the Unix epoch. Generation
//! numbers, journal entry ages, a rebuild's progress and a replaced generation's age are all
//! read from here, so every store and every path agrees on one clock.

use std::time::{SystemTime, UNIX_EPOCH};

/// Microseconds since the Unix epoch: the write timestamps of keys in the database.
pub fn now_us() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_micros() as u64).unwrap_or(1)
}

/// Milliseconds since the Unix epoch: generation numbers, never reused across re-creations.
pub fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(1)
}
