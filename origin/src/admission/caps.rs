//! The memory budget divided: the process's floor first, then the local copies (at most half
//! of what is left), then every open connection's buffers, then what requests in flight may
//! hold: single-key lookups get enough for one per connection, up to half of it, and writes and
//! batches the rest. Each admitted request holds its kind's worst case (`cost`) until its
//! answer is sent, so the requests in flight never hold more than their part, whatever the
//! burst.
//!
//! `max_in_flight`, when set, replaces the derived caps: each class admits that many requests,
//! whatever they cost (the log says what they could hold).

use super::budget::MemoryLimit;
use super::cost::{Costs, CONNECTION_BYTES};
use crate::config::Config;
use crate::metrics::{BudgetPart, Class, Kind, Metrics};
use std::fmt;

/// The process itself, before any request: code, the runtime, the store clients and their
/// connections, definition and metadata caches, metrics. An origin on Redis and Cassandra
/// idles at 20–30 MiB resident; the rest is margin.
pub const FLOOR_BYTES: u64 = 64 << 20;

/// What the allocator adds to the bytes asked for (size classes, pages not yet returned): the
/// requests' part is divided by this before it is shared out. Measured: the burst test's peak
/// resident memory against the heap bytes its requests held.
const ALLOCATOR_OVERHEAD: (u64, u64) = (5, 4);

/// The unit of the writes' and batches' budget: a request takes its worst case in these.
const UNIT_BYTES: u64 = 1024;

/// Why no caps could be derived.
#[derive(Debug, thiserror::Error)]
pub enum CapsError {
    /// The budget cannot hold the process, its connections and one request of each kind.
    #[error(
        "a memory budget of {budget} MiB ({from}) is too small: the process needs {floor} MiB, \
         {connections} MiB for max_connections = {max_connections}, and at least {one_each} MiB \
         for one request of each kind; raise the container's memory limit or memory_budget_bytes, \
         or lower max_connections, max_batch or max_value_bytes"
    )]
    TooSmall {
        /// The budget, MiB.
        budget: u64,
        /// Where it came from.
        from: String,
        /// The floor, MiB.
        floor: u64,
        /// The connections' part, MiB.
        connections: u64,
        /// max_connections.
        max_connections: usize,
        /// One request of each kind, MiB.
        one_each: u64,
    },
}

/// The caps in force and the budget they come from.
#[derive(Clone, Debug)]
pub struct Caps {
    /// The memory budget.
    pub limit: MemoryLimit,
    /// Bytes for local copies (at most `local_copy_max_bytes`).
    pub local_copies: u64,
    /// Bytes for open connections.
    pub connections: u64,
    /// Bytes single-key lookups in flight may hold.
    pub lookups: u64,
    /// Bytes writes and batches in flight may hold.
    pub writes_and_batches: u64,
    /// Each kind's worst case.
    pub costs: Costs,
    /// `max_in_flight`, when set: the caps, instead of the budget.
    pub explicit: Option<usize>,
}

impl Caps {
    /// Divides `limit` for `config`, with local copies of at most `local_copies_wanted` bytes
    /// (0 where there are none: the filter in this process).
    pub fn derive(config: &Config, limit: MemoryLimit, local_copies_wanted: u64) -> Result<Caps, CapsError> {
        let costs = Costs::of(config);
        let available = limit.bytes.saturating_sub(FLOOR_BYTES);
        let local_copies = local_copies_wanted.min(available / 2);
        let connections = config.max_connections as u64 * CONNECTION_BYTES;
        let requests =
            available.saturating_sub(local_copies + connections) * ALLOCATOR_OVERHEAD.1 / ALLOCATOR_OVERHEAD.0;
        let lookups = (config.max_connections as u64 * costs.lookup).min(requests / 2);
        let writes_and_batches = requests - lookups;
        let largest = [Kind::BatchLookup, Kind::Write, Kind::BatchWrite, Kind::EdgeFeed]
            .into_iter()
            .map(|k| costs.of_kind(k))
            .max()
            .unwrap_or(0);
        let explicit = (config.max_in_flight > 0).then_some(config.max_in_flight);
        if explicit.is_none() && (lookups < costs.lookup || writes_and_batches < largest) {
            let mib = |b: u64| b.div_ceil(1 << 20);
            return Err(CapsError::TooSmall {
                budget: limit.bytes >> 20,
                from: limit.source.to_string(),
                floor: mib(FLOOR_BYTES),
                connections: mib(connections),
                max_connections: config.max_connections,
                one_each: mib((costs.lookup + largest) * ALLOCATOR_OVERHEAD.0 / ALLOCATOR_OVERHEAD.1),
            });
        }
        Ok(Caps { limit, local_copies, connections, lookups, writes_and_batches, costs, explicit })
    }

    /// Requests of `kind` that may be in flight at once (alone in their class).
    pub fn cap(&self, kind: Kind) -> u64 {
        match (self.explicit, kind) {
            (Some(n), _) => n as u64,
            (None, Kind::Lookup) => self.lookups / self.costs.lookup,
            (None, kind) => self.writes_and_batches / self.costs.of_kind(kind).next_multiple_of(UNIT_BYTES),
        }
    }

    /// The permits of `class`'s limiter.
    pub fn permits(&self, class: Class) -> usize {
        let permits = match (self.explicit, class) {
            (Some(n), _) => n as u64,
            (None, Class::Lookup) => self.cap(Kind::Lookup),
            (None, Class::WriteOrBatch) => self.writes_and_batches / UNIT_BYTES,
        };
        // tokio's semaphores hold at most usize::MAX >> 3 permits.
        usize::try_from(permits).unwrap_or(usize::MAX).min(usize::MAX >> 3)
    }

    /// The permits one request of `kind` takes from its class's limiter.
    pub fn weight(&self, kind: Kind) -> u32 {
        match (self.explicit, kind) {
            (Some(_), _) | (None, Kind::Lookup) => 1,
            (None, kind) => u32::try_from(self.costs.of_kind(kind).div_ceil(UNIT_BYTES)).unwrap_or(u32::MAX),
        }
    }

    /// Exports the caps and the budget's parts.
    pub fn export(&self, metrics: &Metrics) {
        for kind in Kind::ALL {
            metrics.admission.set_cap(*kind, self.cap(*kind));
        }
        let floor = FLOOR_BYTES.min(self.limit.bytes);
        for (part, bytes) in [
            (BudgetPart::Total, self.limit.bytes),
            (BudgetPart::Floor, floor),
            (BudgetPart::LocalCopies, self.local_copies),
            (BudgetPart::Connections, self.connections),
            (BudgetPart::Lookups, self.lookups),
            (BudgetPart::WritesAndBatches, self.writes_and_batches),
        ] {
            metrics.admission.set_budget(part, bytes);
        }
    }
}

/// The log line's words: the caps, then what they come from.
impl fmt::Display for Caps {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mib = |b: u64| b >> 20;
        let caps = |f: &mut fmt::Formatter<'_>| {
            write!(
                f,
                "lookups {}; writes and batches {} single writes, or {} batch writes, or {} batch lookups, or {} edge feed requests",
                self.cap(Kind::Lookup),
                self.cap(Kind::Write),
                self.cap(Kind::BatchWrite),
                self.cap(Kind::BatchLookup),
                self.cap(Kind::EdgeFeed),
            )
        };
        if let Some(n) = self.explicit {
            write!(f, "in-flight caps from max_in_flight = {n} (not from memory): ")?;
            caps(f)?;
            let worst = n as u64 * self.costs.batch_lookup;
            return write!(
                f,
                "; at worst {} MiB in flight, against a budget of {} MiB",
                mib(worst),
                mib(self.limit.bytes)
            );
        }
        write!(f, "in-flight caps from memory: ")?;
        caps(f)?;
        write!(
            f,
            "; budget {} MiB ({}): process {} MiB, local copies {} MiB, {} connections {} MiB, lookups {} MiB ({} KiB each), writes and batches {} MiB (single write {} KiB, batch write {} MiB, batch lookup {} MiB, edge feed {} MiB)",
            mib(self.limit.bytes),
            self.limit.source,
            mib(FLOOR_BYTES),
            mib(self.local_copies),
            self.connections / CONNECTION_BYTES,
            mib(self.connections),
            mib(self.lookups),
            self.costs.lookup >> 10,
            mib(self.writes_and_batches),
            self.costs.write >> 10,
            mib(self.costs.batch_write),
            mib(self.costs.batch_lookup),
            mib(self.costs.feed),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::budget::Source;

    fn limit(mib: u64) -> MemoryLimit {
        MemoryLimit { bytes: mib << 20, source: Source::Setting }
    }

    #[test]
    fn a_pod_of_one_gib_holds_every_kind_within_its_part() {
        let config = Config::default();
        let caps = Caps::derive(&config, limit(1024), 256 << 20).unwrap();
        assert_eq!(caps.local_copies, 256 << 20);
        assert!((1000..config.max_connections as u64).contains(&caps.cap(Kind::Lookup)), "{caps}");
        let parts = FLOOR_BYTES + caps.local_copies + caps.connections;
        let requests = (caps.lookups + caps.writes_and_batches) * 5 / 4;
        assert!(parts + requests <= 1 << 30, "the parts add up to at most the budget");
        // Every kind alone, at its cap, stays within its part.
        for kind in Kind::ALL {
            let part = if *kind == Kind::Lookup { caps.lookups } else { caps.writes_and_batches };
            assert!(caps.cap(*kind) >= 1 && caps.cap(*kind) * caps.costs.of_kind(*kind) <= part, "{kind:?}");
            let taken = caps.cap(*kind) * u64::from(caps.weight(*kind));
            assert!(taken <= caps.permits(kind_class(*kind)) as u64, "{kind:?}");
        }
        assert!(caps.cap(Kind::Write) > 100 * caps.cap(Kind::BatchLookup), "a single write is far cheaper");
        let text = caps.to_string();
        assert!(text.contains("from memory") && text.contains("1024 MiB (memory_budget_bytes)"), "{text}");
        // Without values, lookups are cheap enough for one on every connection.
        let no_values = Config { max_value_bytes: 0, ..Config::default() };
        let caps = Caps::derive(&no_values, limit(1024), 256 << 20).unwrap();
        assert_eq!(caps.cap(Kind::Lookup), config.max_connections as u64, "{caps}");
    }

    fn kind_class(kind: Kind) -> Class {
        if kind == Kind::Lookup {
            Class::Lookup
        } else {
            Class::WriteOrBatch
        }
    }

    #[test]
    fn copies_take_at_most_half_and_more_memory_admits_more() {
        let config = Config::default();
        let small = Caps::derive(&config, limit(1024), 1 << 30).unwrap();
        assert_eq!(small.local_copies, (1024 - 64) << 19, "half of what the process leaves");
        let large = Caps::derive(&config, limit(4096), 256 << 20).unwrap();
        assert!(large.cap(Kind::BatchWrite) > 4 * small.cap(Kind::BatchWrite));
        let no_copies = Caps::derive(&config, limit(1024), 0).unwrap();
        assert_eq!(no_copies.local_copies, 0);
        assert!(no_copies.cap(Kind::BatchWrite) > small.cap(Kind::BatchWrite));
        let bigger_batches = Config { max_batch: 4000, ..Config::default() };
        assert!(
            Caps::derive(&bigger_batches, limit(4096), 0).unwrap().cap(Kind::BatchWrite) < large.cap(Kind::BatchWrite)
        );
    }

    #[test]
    fn too_small_a_budget_is_refused_with_what_it_needs_unless_the_caps_are_explicit() {
        let config = Config::default();
        let err = Caps::derive(&config, limit(256), 0).unwrap_err().to_string();
        assert!(
            err.contains("256 MiB (memory_budget_bytes) is too small") && err.contains("max_connections = 4096"),
            "{err}"
        );
        let fewer = Config { max_connections: 256, ..Config::default() };
        assert!(Caps::derive(&fewer, limit(256), 0).is_ok(), "fewer connections leave room");
        let explicit = Config { max_in_flight: 8, ..Config::default() };
        let caps = Caps::derive(&explicit, limit(256), 0).unwrap();
        assert_eq!((caps.cap(Kind::Lookup), caps.cap(Kind::BatchLookup)), (8, 8));
        assert_eq!((caps.permits(Class::WriteOrBatch), caps.weight(Kind::BatchLookup)), (8, 1));
        assert!(caps.to_string().contains("max_in_flight = 8 (not from memory)"), "{caps}");
    }
}
