//! Following the shared feed (docs/design.md, "The edge at many isolates"), without I/O: what
//! to fetch next, what each answer does to the copy held, and until when a "no" stands. The
//! same for every isolate, so shared caches serve what it asks for: the filter's current
//! document at a cold start, its segments at the document's epoch, then every sealed chunk
//! after the epoch, in order, each applied whole before the next.
//!
//! A "no" stands until the end of the last chunk applied, plus the freshness bound S, less ε
//! (`bloomgate_filter::sealed_chunk::answer_no_until_ms`): counted from the chunk, however late
//! it was fetched, whichever cache served it. A page whose seal time reads later than its
//! receipt plus ε proves the clocks further apart than assumed, and a chunk Redis's clock
//! stepped back across proves nothing: either sends the follower to the fallback (the isolate's
//! own journal path, freshness counted from its ask). A chunk saying its generation was
//! superseded, or one whose entries are gone, sends it back to a cold start.
//!
//! The caller does the I/O (`wasm32` glue, or the native isolates of the fleet run) and feeds
//! each answer back; a copy is held whole (one `BloomFilter` of the generation's params).

use bloomgate_filter::feed_current::{slot_of, FeedCurrent};
use bloomgate_filter::sealed_chunk::{answer_no_until_ms, within_clock_bound, ChunkClock};
use bloomgate_filter::sealed_page::decode_page;
use bloomgate_filter::{decode_segment, hash_key, BloomFilter, KeyFormat, KeyHash, Params};
use std::collections::BTreeSet;

/// What the follower needs next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// The filter's current document for this slot.
    Current {
        /// The slot of now.
        slot: u64,
    },
    /// A segment of the generation at the epoch.
    Segment {
        /// The generation.
        generation: u64,
        /// The epoch.
        epoch: u64,
        /// The segment.
        index: u32,
    },
    /// A page of the next chunk.
    Page {
        /// The generation.
        generation: u64,
        /// The chunk.
        chunk: u64,
        /// The page.
        page: u32,
    },
    /// Nothing before this moment (ms, the isolate's clock): the next chunk's end.
    Wait {
        /// When to ask again.
        until_ms: u64,
    },
    /// The shared feed cannot be trusted now: keep fresh by the isolate's own path.
    Fallback,
}

/// How the origin refused a request of the shared feed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// 425: the chunk is not sealed yet.
    NotYet,
    /// 409: Redis's clock stepped back across the chunk's end.
    Unsealable,
    /// 410: the chunk's entries are gone.
    Gone,
}

impl Refused {
    /// The refusal an answer's status means; None for one that is no refusal of the feed's (a
    /// 5xx, a timeout's: try again later, nothing changes). A 404 (a token the origin no longer
    /// takes, a filter dropped) is read as gone: a cold start asks what is current.
    pub fn of_status(status: u16) -> Option<Refused> {
        match status {
            425 => Some(Refused::NotYet),
            409 => Some(Refused::Unsealable),
            410 | 404 => Some(Refused::Gone),
            _ => None,
        }
    }
}

/// Whether a filter of `bits` bytes may be followed whole by an isolate whose followers hold
/// `others` bytes, under its `budget`: at most a quarter of it for one filter, half for all, so
/// the segment copies of the isolate's own path keep the rest.
pub fn fits(bits: u64, others: usize, budget: usize) -> bool {
    let bits = usize::try_from(bits).unwrap_or(usize::MAX);
    bits <= budget / 4 && others.saturating_add(bits) <= budget / 2
}

/// What the copy followed says of a key now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FeedAnswer {
    /// Certainly never stored, and the copy is fresh: answer "not seen" here.
    NotSeen {
        /// The generation that says so.
        generation: u64,
    },
    /// The copy is fresh and has the key's bits: only the origin knows.
    Maybe,
    /// No fresh copy (or the key is not one the filter's format reads): the feed cannot say.
    Unknown,
}

/// Why an answer was not taken (the follower is unchanged).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Rejected {
    /// Not what was asked for (another generation, chunk, page or segment), or unreadable.
    Unexpected(String),
    /// The document's format is newer than this build reads.
    Format(String),
}

/// The follower's answer for a key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Certainly never stored: answer 404 here.
    NotSeen,
    /// Ask the origin.
    Forward,
}

enum Phase {
    Cold,
    Loading {
        current: FeedCurrent,
        bits: BloomFilter,
        missing: BTreeSet<u32>,
    },
    Following {
        generation: u64,
        params: Params,
        key_format: KeyFormat,
        bits: BloomFilter,
        through: u64,
        next_page: u32,
        /// When the last answer applied was received (the isolate's clock): only for the
        /// planted bug that counts freshness from it.
        received_at_ms: u64,
    },
    Fallback,
}

/// One isolate's follower of one filter's shared feed.
pub struct Follower {
    clock: ChunkClock,
    freshness_ms: u64,
    epsilon_ms: u64,
    phase: Phase,
}

impl Follower {
    /// A follower at a cold start, reading chunks of `clock`, with the freshness bound S and
    /// the clock bound ε, in ms.
    pub fn new(clock: ChunkClock, freshness_ms: u64, epsilon_ms: u64) -> Follower {
        Follower { clock, freshness_ms, epsilon_ms, phase: Phase::Cold }
    }

    /// What to fetch next at `now_ms`.
    pub fn next(&self, now_ms: u64) -> Next {
        match &self.phase {
            Phase::Cold => Next::Current { slot: slot_of(now_ms) },
            Phase::Loading { current, missing, .. } => match missing.first() {
                Some(&index) => Next::Segment { generation: current.generation, epoch: current.epoch, index },
                None => Next::Wait { until_ms: now_ms },
            },
            Phase::Following { generation, through, next_page, .. } => {
                let chunk = through + 1;
                let end = self.clock.end_ms(chunk);
                if *next_page > 0 || now_ms >= end {
                    Next::Page { generation: *generation, chunk, page: *next_page }
                } else {
                    Next::Wait { until_ms: end }
                }
            }
            Phase::Fallback => Next::Fallback,
        }
    }

    /// Takes the filter's current document.
    pub fn on_current(&mut self, current: FeedCurrent) -> Result<(), Rejected> {
        current.check_format().map_err(Rejected::Format)?;
        if current.width_ms != self.clock.width_ms() {
            return Err(Rejected::Unexpected(format!("a document for chunks of {} ms", current.width_ms)));
        }
        let bits = BloomFilter::try_new(current.params).map_err(|e| Rejected::Unexpected(e.to_string()))?;
        let missing = (0..current.params.segment_count).collect();
        self.phase = Phase::Loading { current, bits, missing };
        Ok(())
    }

    /// Takes segment `index` at the epoch (its wire bytes), received at `received_at_ms`.
    pub fn on_segment(&mut self, index: u32, bytes: &[u8], received_at_ms: u64) -> Result<(), Rejected> {
        let Phase::Loading { current, bits, missing } = &mut self.phase else {
            return Err(Rejected::Unexpected("a segment while not loading".into()));
        };
        let view = decode_segment(bytes).map_err(|e| Rejected::Unexpected(e.to_string()))?;
        let header = view.header();
        if header.generation != current.generation || header.index != index || header.params != current.params {
            return Err(Rejected::Unexpected(format!("segment {} of generation {}", header.index, header.generation)));
        }
        // A segment's version is the end (ms, Redis's clock) of the epoch it holds every write
        // through: an older one (a cache answering with another epoch's URL, of any chunk
        // width) lacks writes that no chunk after this epoch brings.
        let through_ms = self.clock.end_ms(current.epoch);
        if header.version < through_ms {
            return Err(Rejected::Unexpected(format!(
                "segment {index} holding writes through {} ms, not {through_ms}",
                header.version
            )));
        }
        if !missing.contains(&index) || !bits.merge_segment_payload(index, view.payload()) {
            return Err(Rejected::Unexpected(format!("segment {index} not wanted")));
        }
        missing.remove(&index);
        if missing.is_empty() {
            let Phase::Loading { current, bits, .. } = std::mem::replace(&mut self.phase, Phase::Cold) else {
                unreachable!("matched above")
            };
            self.phase = Phase::Following {
                generation: current.generation,
                params: current.params,
                key_format: current.key_format,
                bits,
                through: current.epoch,
                next_page: 0,
                received_at_ms,
            };
        }
        Ok(())
    }

    /// Takes a page of the next chunk, received at `received_at_ms` (the isolate's clock).
    pub fn on_page(&mut self, bytes: &[u8], received_at_ms: u64) -> Result<(), Rejected> {
        let Phase::Following { generation, params, bits, through, next_page, received_at_ms: received, .. } =
            &mut self.phase
        else {
            return Err(Rejected::Unexpected("a page while not following".into()));
        };
        let view = decode_page(bytes).map_err(|e| Rejected::Unexpected(e.to_string()))?;
        let h = view.header;
        let expected = (*generation, params.seed, *through + 1, *next_page, self.clock.width_ms());
        if (h.generation, h.seed, h.chunk, h.page, u64::from(h.width_ms)) != expected {
            return Err(Rejected::Unexpected(format!(
                "page {} of chunk {} of generation {}",
                h.page, h.chunk, h.generation
            )));
        }
        if !within_clock_bound(h.read_at_ms, received_at_ms, self.epsilon_ms) {
            self.phase = Phase::Fallback;
            return Ok(());
        }
        for hash in view.hashes() {
            bits.insert_hash(&hash);
        }
        *received = received_at_ms;
        if h.page + 1 < h.pages {
            *next_page += 1;
        } else {
            (*through, *next_page) = (*through + 1, 0);
        }
        if h.superseded_by.is_some() && *next_page == 0 {
            self.phase = Phase::Cold;
        }
        Ok(())
    }

    /// Takes a refusal of what [`next`](Self::next) asked for.
    pub fn on_refused(&mut self, refused: Refused) {
        match refused {
            Refused::NotYet => {}
            Refused::Unsealable => self.phase = Phase::Fallback,
            Refused::Gone => self.phase = Phase::Cold,
        }
    }

    /// Until when (the isolate's clock, ms) a "no" from the copy stands; None while no copy is
    /// followed.
    pub fn answers_until_ms(&self) -> Option<u64> {
        match &self.phase {
            Phase::Following { through, received_at_ms, .. } => {
                if crate::planted::active(crate::planted::Bug::FeedFreshnessFromReceipt) {
                    return Some((received_at_ms + self.freshness_ms).saturating_sub(self.epsilon_ms));
                }
                Some(answer_no_until_ms(&self.clock, *through, self.freshness_ms, self.epsilon_ms))
            }
            _ => None,
        }
    }

    /// The answer for a key's hash (under the followed generation's seed) at `now_ms`.
    pub fn verdict(&self, hash: &KeyHash, now_ms: u64) -> Verdict {
        let Phase::Following { bits, .. } = &self.phase else { return Verdict::Forward };
        let fresh = self.answers_until_ms().is_some_and(|until| now_ms < until);
        match fresh && !bits.may_contain_hash(hash) {
            true => Verdict::NotSeen,
            false => Verdict::Forward,
        }
    }

    /// Whether the copy followed has a key's hash (under the followed generation's seed),
    /// however fresh: a measure of how soon writes arrive, never an answer (see
    /// [`verdict`](Self::verdict)).
    pub fn holds(&self, hash: &KeyHash) -> bool {
        matches!(&self.phase, Phase::Following { bits, .. } if bits.may_contain_hash(hash))
    }

    /// What the copy says of `key` (as given: normalised here by the filter's key format) at
    /// `now_ms`.
    pub fn answer(&self, key: &[u8], now_ms: u64) -> FeedAnswer {
        let Phase::Following { generation, params, key_format, bits, .. } = &self.phase else {
            return FeedAnswer::Unknown;
        };
        let fresh = self.answers_until_ms().is_some_and(|until| now_ms < until);
        let Ok(normalized) = key_format.normalize(key) else { return FeedAnswer::Unknown };
        match (fresh, bits.may_contain_hash(&hash_key(&normalized, params.seed))) {
            (false, _) => FeedAnswer::Unknown,
            (true, true) => FeedAnswer::Maybe,
            (true, false) => FeedAnswer::NotSeen { generation: *generation },
        }
    }

    /// Bytes the follower holds (the copy's bits, or those it is loading).
    pub fn held_bytes(&self) -> usize {
        match &self.phase {
            Phase::Loading { current, .. } => current.params.total_bytes() as usize,
            Phase::Following { params, .. } => params.total_bytes() as usize,
            _ => 0,
        }
    }

    /// The params and key format of the generation followed, if any: what a key's hash is
    /// taken under.
    pub fn keys(&self) -> Option<(Params, KeyFormat)> {
        match &self.phase {
            Phase::Following { params, key_format, .. } => Some((*params, *key_format)),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bloomgate_filter::feed_current::FEED_CURRENT_FORMAT;
    use bloomgate_filter::sealed_page::{encode_page, PageHeader};
    use bloomgate_filter::{encode_segment, KeyFormat, SizingOptions};

    const WIDTH: u64 = 250;
    const S: u64 = 2_000;
    const EPSILON: u64 = 100;
    const GENERATION: u64 = 1_765_000_000_000;
    const EPOCH: u64 = 7_060_000_000;

    fn params() -> Params {
        Params::for_capacity_with(10_000, 0.01, SizingOptions { seed: 9, segment_bytes: 4096 }).unwrap()
    }

    fn current() -> FeedCurrent {
        FeedCurrent {
            format: FEED_CURRENT_FORMAT,
            filter: "f".into(),
            key_format: KeyFormat::Bytes,
            generation: GENERATION,
            params: params(),
            width_ms: WIDTH,
            epoch: EPOCH,
            read_at_ms: (EPOCH + 1) * WIDTH,
        }
    }

    fn hash(key: &str) -> KeyHash {
        hash_key(key.as_bytes(), params().seed)
    }

    fn page(chunk: u64, page: u32, pages: u32, keys: &[&str], superseded_by: Option<u64>) -> Vec<u8> {
        let header = PageHeader {
            generation: GENERATION,
            seed: params().seed,
            chunk,
            width_ms: WIDTH as u32,
            page,
            pages,
            read_at_ms: (chunk + 1) * WIDTH,
            superseded_by,
        };
        encode_page(&header, &keys.iter().map(|k| hash(k)).collect::<Vec<_>>())
    }

    /// A follower that loaded the segments at the epoch, holding `keys`.
    fn following(keys: &[&str]) -> Follower {
        let mut f = Follower::new(ChunkClock::new(WIDTH).unwrap(), S, EPSILON);
        assert_eq!(f.next(0), Next::Current { slot: 0 });
        f.on_current(current()).unwrap();
        let whole = BloomFilter::new(params());
        for key in keys {
            whole.insert_shared(key.as_bytes());
        }
        while let Next::Segment { index, .. } = f.next(0) {
            let through = (EPOCH + 1) * WIDTH;
            let bytes = encode_segment(&params(), GENERATION, index, through, &whole.segment_payload(index)).unwrap();
            f.on_segment(index, &bytes, 0).unwrap();
        }
        f
    }

    #[test]
    fn a_cold_follower_loads_the_epoch_then_asks_for_each_chunk_after_its_end() {
        let mut f = following(&["old"]);
        let end = (EPOCH + 2) * WIDTH;
        assert_eq!(f.next(end - 1), Next::Wait { until_ms: end });
        assert_eq!(f.next(end), Next::Page { generation: GENERATION, chunk: EPOCH + 1, page: 0 });
        f.on_page(&page(EPOCH + 1, 0, 2, &["a"], None), end).unwrap();
        assert_eq!(f.next(end), Next::Page { generation: GENERATION, chunk: EPOCH + 1, page: 1 }, "the rest first");
        f.on_page(&page(EPOCH + 1, 1, 2, &["b"], None), end).unwrap();
        assert_eq!(f.next(end), Next::Wait { until_ms: end + WIDTH });
        for key in ["old", "a", "b"] {
            assert_eq!(f.verdict(&hash(key), end), Verdict::Forward, "{key} was written");
            assert!(f.holds(&hash(key)), "{key}");
        }
        assert!(!f.holds(&hash("never written")));
    }

    #[test]
    fn a_no_stands_until_the_chunks_end_plus_s_less_epsilon_counted_from_the_chunk() {
        let mut f = following(&[]);
        let absent = hash("never written");
        let until = (EPOCH + 1) * WIDTH + S - EPSILON;
        assert_eq!(f.answers_until_ms(), Some(until));
        assert_eq!(f.verdict(&absent, until - 1), Verdict::NotSeen);
        assert_eq!(f.verdict(&absent, until), Verdict::Forward, "past the bound: ask the origin");
        // A chunk fetched late (from a cache) moves the bound by its own end, not the fetch.
        f.on_page(&page(EPOCH + 1, 0, 1, &[], None), until + 5_000).unwrap();
        assert_eq!(f.answers_until_ms(), Some(until + WIDTH));
        assert_eq!(f.verdict(&absent, until + 5_000), Verdict::Forward);
    }

    #[test]
    fn a_keys_answer_says_no_only_from_a_fresh_copy_without_its_bits() {
        let mut cold = Follower::new(ChunkClock::new(WIDTH).unwrap(), S, EPSILON);
        assert_eq!(cold.answer(b"a", 0), FeedAnswer::Unknown, "nothing followed");
        cold.on_current(current()).unwrap();
        assert_eq!(cold.held_bytes(), params().total_bytes() as usize, "loading holds the bits");
        let f = following(&["a"]);
        let until = (EPOCH + 1) * WIDTH + S - EPSILON;
        assert_eq!(f.answer(b"a", until - 1), FeedAnswer::Maybe);
        assert_eq!(f.answer(b"never written", until - 1), FeedAnswer::NotSeen { generation: GENERATION });
        assert_eq!(f.answer(b"never written", until), FeedAnswer::Unknown, "stale: the feed cannot say");
        assert_eq!(Refused::of_status(425), Some(Refused::NotYet));
        assert_eq!(Refused::of_status(404), Some(Refused::Gone));
        assert_eq!(Refused::of_status(503), None);
        assert!(fits(25, 0, 100) && !fits(26, 0, 100), "a quarter of the budget for one");
        assert!(fits(25, 25, 100) && !fits(25, 26, 100), "half for all");
    }

    #[test]
    fn a_page_sealed_after_its_receipt_plus_epsilon_sends_the_follower_to_the_fallback() {
        let mut f = following(&[]);
        let sealed_at = (EPOCH + 2) * WIDTH;
        f.on_page(&page(EPOCH + 1, 0, 1, &[], None), sealed_at - EPSILON - 1).unwrap();
        assert_eq!(f.next(sealed_at), Next::Fallback);
        assert_eq!(f.verdict(&hash("never written"), sealed_at), Verdict::Forward);
    }

    #[test]
    fn refusals_and_a_superseded_generation_change_the_phase() {
        let mut f = following(&[]);
        f.on_refused(Refused::NotYet);
        assert!(f.answers_until_ms().is_some(), "not yet: nothing changes");
        f.on_refused(Refused::Gone);
        assert!(matches!(f.next(0), Next::Current { .. }), "entries gone: a cold start");
        let mut f = following(&[]);
        f.on_refused(Refused::Unsealable);
        assert_eq!(f.next(0), Next::Fallback);
        let mut f = following(&[]);
        f.on_page(&page(EPOCH + 1, 0, 1, &["a"], Some(GENERATION + 1)), (EPOCH + 2) * WIDTH).unwrap();
        assert!(matches!(f.next(0), Next::Current { .. }), "superseded: the current document again");
    }

    #[test]
    fn an_answer_not_asked_for_is_rejected_and_changes_nothing() {
        let mut f = following(&[]);
        let end = (EPOCH + 2) * WIDTH;
        assert!(f.on_page(&page(EPOCH + 2, 0, 1, &["a"], None), end).is_err(), "a chunk skipped");
        assert!(f.on_page(&page(EPOCH + 1, 1, 2, &["a"], None), end).is_err(), "a page skipped");
        assert!(f.on_page(b"garbage", end).is_err());
        assert_eq!(f.verdict(&hash("a"), end), Verdict::NotSeen, "nothing was applied");
        assert!(f.on_segment(0, b"garbage", end).is_err(), "a segment while following");
        let mut loading = Follower::new(ChunkClock::new(WIDTH).unwrap(), S, EPSILON);
        loading.on_current(current()).unwrap();
        let payload = BloomFilter::new(params()).segment_payload(0);
        let through = (EPOCH + 1) * WIDTH;
        let older = encode_segment(&params(), GENERATION, 0, through - 1, &payload).unwrap();
        assert!(loading.on_segment(0, &older, 0).is_err(), "a segment of an older epoch lacks its writes");
        let newer = encode_segment(&params(), GENERATION, 0, through + 3 * WIDTH, &payload).unwrap();
        assert!(loading.on_segment(0, &newer, 0).is_ok(), "a newer one holds them all (bits are only set)");
        let mut cold = Follower::new(ChunkClock::new(WIDTH).unwrap(), S, EPSILON);
        let newer = FeedCurrent { format: FEED_CURRENT_FORMAT + 1, ..current() };
        assert!(matches!(cold.on_current(newer), Err(Rejected::Format(_))));
        let wider = FeedCurrent { width_ms: 500, ..current() };
        assert!(cold.on_current(wider).is_err());
        assert_eq!(cold.verdict(&hash("a"), 0), Verdict::Forward, "nothing followed: ask the origin");
    }
}
