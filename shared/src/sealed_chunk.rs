//! Sealed journal chunks (docs/design.md, "The edge at many isolates"): a generation's insert
//! journal cut by its entries' stream ids into chunks of Δ ms of Redis's clock, so that every
//! isolate asks for the same immutable URLs; when a chunk may be served; and until when an edge
//! holding every chunk through one may answer "not seen". Pure: the origin's sealing script
//! and the edge's fetches act on these rules.
//!
//! Stream ids only grow, whatever Redis's clock does (an entry's id is `max(TIME, last id)`),
//! so once the journal's last id is at or past a chunk's end, no entry can land in it again.

/// The narrowest chunk: narrower ones would multiply requests without making answers fresher
/// than the network lets them be.
pub const MIN_CHUNK_MS: u64 = 100;
/// The widest chunk: a chunk's width is added to the time a key takes to be seen at the edge.
pub const MAX_CHUNK_MS: u64 = 1_000;

/// A width out of bounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkWidthError(pub u64);

impl core::fmt::Display for ChunkWidthError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "a journal chunk of {} ms is out of bounds: use {MIN_CHUNK_MS} to {MAX_CHUNK_MS} ms", self.0)
    }
}

/// How a journal is cut into chunks: Δ, in ms of Redis's clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkClock {
    width_ms: u64,
}

impl ChunkClock {
    /// Chunks of `width_ms`, within bounds.
    pub fn new(width_ms: u64) -> Result<ChunkClock, ChunkWidthError> {
        match width_ms {
            MIN_CHUNK_MS..=MAX_CHUNK_MS => Ok(ChunkClock { width_ms }),
            _ => Err(ChunkWidthError(width_ms)),
        }
    }

    /// Δ.
    pub fn width_ms(&self) -> u64 {
        self.width_ms
    }

    /// The chunk holding an entry whose stream id has these milliseconds.
    pub fn chunk_of(&self, id_ms: u64) -> u64 {
        id_ms / self.width_ms
    }

    /// The first millisecond of chunk `k`.
    pub fn start_ms(&self, k: u64) -> u64 {
        k.saturating_mul(self.width_ms)
    }

    /// The millisecond after chunk `k`'s last.
    pub fn end_ms(&self, k: u64) -> u64 {
        k.saturating_add(1).saturating_mul(self.width_ms)
    }

    /// The newest chunk whose end Redis's clock has reached (`redis_now_ms`): the newest that
    /// may be sealed now; None before the first.
    pub fn newest_sealable(&self, redis_now_ms: u64) -> Option<u64> {
        (redis_now_ms / self.width_ms).checked_sub(1)
    }
}

/// A span of stream ids an add ran ahead of Redis's clock: its `TIME` read `from_ms`, and the
/// id it got had `to_ms` (Redis's clock had stepped back behind the journal's last id).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SteppedBack {
    /// Redis's clock when the add ran.
    pub from_ms: u64,
    /// The id's milliseconds it got.
    pub to_ms: u64,
}

/// What the origin may do with a chunk asked for, from the journal's state read atomically.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Seal {
    /// Sealed: serve it, immutable.
    Sealed,
    /// Redis's clock is past its end but no entry is: append an empty marker entry (its id is
    /// past the end), and it is sealed.
    SealNow,
    /// Still open: ask again in this many ms (of Redis's clock).
    Open {
        /// Until its end.
        ready_in_ms: u64,
    },
    /// An add ran ahead of Redis's clock across its end: an entry acknowledged before the end
    /// by Redis's clock may lie after it, so its end proves nothing. The edge takes the path
    /// whose freshness counts from its own ask.
    Unsealable,
}

/// Whether chunk `k` may be served, given Redis's clock and the journal's last id (both read
/// in the same script) and the spans adds ran ahead of the clock.
pub fn seal(clock: &ChunkClock, k: u64, redis_now_ms: u64, last_id_ms: u64, stepped_back: &[SteppedBack]) -> Seal {
    let end = clock.end_ms(k);
    // An add whose clock read before the end got an id at or past it: the chunk misses an entry
    // of a write acknowledged, by Redis's clock, before the end.
    if stepped_back.iter().any(|s| s.from_ms < end && end <= s.to_ms) {
        return Seal::Unsealable;
    }
    if last_id_ms >= end {
        Seal::Sealed
    } else if redis_now_ms >= end {
        Seal::SealNow
    } else {
        Seal::Open { ready_in_ms: end - redis_now_ms }
    }
}

/// Until when, by the edge's clock (ms), an edge whose filter holds every chunk through `k`
/// may answer "not seen": the chunk's end plus the freshness bound S, less ε, the most Redis's
/// clock may read ahead of the edge's. A key acknowledged when Redis's clock read before the
/// end is in those chunks; one acknowledged later was acknowledged, by the edge's clock, after
/// end − ε, so a lookup S after it reads the edge's clock past this.
pub fn answer_no_until_ms(clock: &ChunkClock, k: u64, freshness_ms: u64, epsilon_ms: u64) -> u64 {
    clock.end_ms(k).saturating_add(freshness_ms).saturating_sub(epsilon_ms)
}

/// The edge's check on every chunk it receives: a chunk sealed, by Redis's clock, later than
/// the edge received it (by its own) plus ε proves the clocks further apart than ε, and the
/// edge must not count freshness from chunks while that holds.
pub fn within_clock_bound(sealed_at_ms: u64, received_at_ms: u64, epsilon_ms: u64) -> bool {
    sealed_at_ms <= received_at_ms.saturating_add(epsilon_ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn clock() -> ChunkClock {
        ChunkClock::new(250).unwrap()
    }

    #[test]
    fn widths_are_bounded_and_chunks_tile_the_clock() {
        assert_eq!(ChunkClock::new(99), Err(ChunkWidthError(99)));
        assert_eq!(ChunkClock::new(1_001), Err(ChunkWidthError(1_001)));
        let c = clock();
        assert_eq!((c.chunk_of(0), c.chunk_of(249), c.chunk_of(250)), (0, 0, 1));
        assert_eq!((c.start_ms(4), c.end_ms(4)), (1_000, 1_250));
        assert_eq!(c.end_ms(u64::MAX), u64::MAX, "saturates, never wraps");
        assert_eq!(
            (c.newest_sealable(249), c.newest_sealable(250), c.newest_sealable(1_999)),
            (None, Some(0), Some(6))
        );
        assert!(ChunkWidthError(5).to_string().contains("100 to 1000 ms"));
    }

    #[test]
    fn a_chunk_is_served_only_once_no_entry_can_land_in_it() {
        let c = clock();
        // Chunk 4 is [1000, 1250).
        assert_eq!(seal(&c, 4, 1_100, 1_100, &[]), Seal::Open { ready_in_ms: 150 });
        assert_eq!(seal(&c, 4, 1_249, 1_200, &[]), Seal::Open { ready_in_ms: 1 });
        assert_eq!(seal(&c, 4, 1_250, 1_200, &[]), Seal::SealNow, "the clock is past the end, no entry is");
        assert_eq!(seal(&c, 4, 1_300, 1_250, &[]), Seal::Sealed, "an entry at the end seals it");
        // Redis's clock stepped back, but the journal's ids are past the end: sealed all the same.
        assert_eq!(seal(&c, 4, 900, 1_400, &[]), Seal::Sealed);
    }

    #[test]
    fn a_chunk_whose_end_an_add_ran_across_is_never_sealed() {
        let c = clock();
        let step = [SteppedBack { from_ms: 1_200, to_ms: 1_400 }];
        assert_eq!(seal(&c, 4, 2_000, 2_000, &step), Seal::Unsealable, "end 1250 lies in (1200, 1400]");
        assert_eq!(seal(&c, 3, 2_000, 2_000, &step), Seal::Sealed, "end 1000 is before the span");
        assert_eq!(seal(&c, 5, 2_000, 2_000, &step), Seal::Sealed, "end 1500 is after it");
        let at_the_end = [SteppedBack { from_ms: 1_250, to_ms: 1_300 }];
        assert_eq!(seal(&c, 4, 2_000, 2_000, &at_the_end), Seal::Sealed, "its clock read the end: not before it");
    }

    #[test]
    fn freshness_counts_from_the_chunks_end_less_the_clock_bound() {
        let c = clock();
        assert_eq!(answer_no_until_ms(&c, 4, 2_000, 100), 1_250 + 2_000 - 100);
        assert_eq!(answer_no_until_ms(&c, 0, 0, 10_000), 0, "saturates at zero");
        assert!(within_clock_bound(1_300, 1_250, 50));
        assert!(!within_clock_bound(1_301, 1_250, 50), "sealed later than received plus ε");
    }
}
