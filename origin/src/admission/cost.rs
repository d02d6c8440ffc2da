//! What one admitted request can cost in memory at worst, by kind, for the limits configured.
//!
//! # How these were measured
//! `tests/tests/request_memory.rs` serves an origin on real Redis and Cassandra in a process
//! whose global allocator counts the heap bytes in use and their peak (`peak_alloc`), sends one
//! request at a time on a fresh connection from a client that allocates nothing while it
//! waits, and takes the peak above the baseline: everything the request held at its worst
//! (the connection's buffers, the body, the parsed and normalised keys, the store calls, the
//! answer and its JSON). Each kind is sent at its limits: keys of the longest length (`hex`,
//! 2,048 digits), a full batch, values of `max_value_bytes` control characters (JSON writes each
//! as the six bytes `\u0001`, the largest answer a value can make), every key of a batch lookup
//! present with such a value. The test runs four configurations and fails if any kind costs
//! more than the formulas below say. Measured on 2026-12-05 (heap bytes at the peak, the least of
//! a few runs):
//!
//! | max_batch, max_value_bytes | lookup | write | batch lookup | batch write |
//! |---|---|---|---|---|
//! | 1000, 4096 (defaults) | 83,678 | 73,689 | 65,440,055 | 8,094,582 |
//! | 250, 4096 | 83,678 | 73,689 | 16,480,148 | 2,460,502 |
//! | 1000, 1024 | 39,896 | 50,129 | 19,888,439 | 8,094,582 |
//! | 100, 0 | 34,707 | 36,777 | 1,048,330 | 1,234,358 |
//!
//! Measured again on 2026-12-07 with the lookup served by its own lane (`routes::lookup_lane`):
//! lookups 96,402 / 96,402 / 52,620 / 45,574 in the four configurations, about 11 KB more in
//! each, not yet explained (the lane's one boxed future holds what the layers' futures held
//! apart; being traced); the formula's constant covers it.
//!
//! An idle or kept-alive connection holds 19,187–20,165 bytes (hyper's buffers, the task). A
//! request of the edge's feed is not measured: it is taken at 16 MiB, four times the largest
//! segment (read, copied, encoded, sent).
//!
//! A batch lookup is the expensive one: each answer carries its value, which JSON can write at
//! six times its size, and the answer is built whole before it is sent. The formulas round the
//! measured slopes up; these are heap bytes asked for: the allocator's own overhead is added
//! where the budget is divided (`caps`).

use crate::config::Config;
use crate::metrics::Kind;

/// Bytes an open connection holds between requests (measured: 19,187–20,165).
pub const CONNECTION_BYTES: u64 = 24 << 10;

/// Bytes a request for the edge's feed can hold at worst: a segment of the largest size the
/// filter core allows (4 MiB) read from the filter store, encoded, and sent.
pub const FEED_BYTES: u64 = 16 << 20;

/// The worst-case memory of one admitted request of each kind, for a configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Costs {
    /// A single-key lookup: the longest key, the largest value in its answer.
    pub lookup: u64,
    /// A batch lookup: `max_batch` of the longest keys, every one present with the largest value.
    pub batch_lookup: u64,
    /// A single-key write with the largest value (deletes and the filters' requests cost less).
    pub write: u64,
    /// A batch write: `max_batch` of the longest keys, the body at its limit.
    pub batch_write: u64,
    /// A request of the edge's feed (manifest, journal chunk, segment).
    pub feed: u64,
}

impl Costs {
    /// The costs at `config`'s limits (`max_batch`, `max_value_bytes`).
    pub fn of(config: &Config) -> Costs {
        let (batch, value) = (config.max_batch as u64, config.max_value_bytes as u64);
        Costs {
            // Measured slope 14.3 bytes per value byte (the value, its copy, its JSON).
            lookup: (48 << 10) + 15 * value,
            // Measured: 65 KB a key at 4 KiB values, 20 KB at 1 KiB, 11 KB without.
            batch_lookup: (64 << 10) + batch * ((12 << 10) + 16 * value),
            // Measured slope 6.0 bytes per value byte (the body, the value bound and stored);
            // 73.7 KB at 4 KiB values, 36.8 KB without.
            write: (64 << 10) + 6 * value,
            // Measured 7.5–8.1 KB a key (the body, its keys parsed, hashed, sent to both stores).
            batch_write: (1 << 20) + batch * (8 << 10),
            feed: FEED_BYTES,
        }
    }

    /// The cost of `kind`.
    pub fn of_kind(&self, kind: Kind) -> u64 {
        match kind {
            Kind::Lookup => self.lookup,
            Kind::BatchLookup => self.batch_lookup,
            Kind::Write => self.write,
            Kind::BatchWrite => self.batch_write,
            Kind::EdgeFeed => self.feed,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn costs_grow_with_the_limits_that_bound_them() {
        let defaults = Costs::of(&Config::default());
        assert!(defaults.lookup >= 83_678 && defaults.batch_lookup >= 65_440_055);
        assert!(defaults.write >= 73_689 && defaults.batch_write >= 8_094_582);
        let smaller = Costs::of(&Config { max_batch: 10, max_value_bytes: 0, ..Config::default() });
        for kind in [Kind::Lookup, Kind::BatchLookup, Kind::Write, Kind::BatchWrite] {
            assert!(smaller.of_kind(kind) < defaults.of_kind(kind), "{kind:?}");
        }
        assert_eq!(smaller.of_kind(Kind::EdgeFeed), defaults.feed, "a segment's size is not a setting");
    }
}
