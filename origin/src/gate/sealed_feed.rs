//! The shared feed (docs/design.md, "The edge at many isolates"): pages of sealed journal
//! chunks, and segments at an epoch (a sealed chunk), each the same for every isolate, so
//! shared caches serve them. A chunk is sealed here, by Redis's clock, when first asked for
//! after its end (`EdgeFeedStore::read_sealed_chunk`); until then, and when Redis's clock
//! stepped back across its end, the edge is told what to do instead.

use super::Gate;
use crate::clock::now_ms;
use crate::error::AppError;
use crate::store::{FilterState, FilterUnavailable, Generation, SealedRead};
use bloomgate_filter::encode_segment;
use bloomgate_filter::feed_current::{
    slot_of, slot_standing, FeedCurrent, SlotStanding, CURRENT_SLOT_MS, FEED_CURRENT_FORMAT,
};
use bloomgate_filter::sealed_chunk::{seal, ChunkClock, Seal};
use bloomgate_filter::sealed_page::{encode_page, pages_for, PageHeader, MAX_PAGE_HASHES};

/// Why the shared feed does not answer with what was asked, and what the edge does instead.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The chunk is not sealed yet (Redis's clock has not reached its end): ask again in this
    /// many ms.
    Open {
        /// Until its end, by Redis's clock.
        retry_after_ms: u64,
    },
    /// Redis's clock stepped back across the chunk's end: it proves nothing, and the edge keeps
    /// itself fresh from the journal instead.
    Unsealable,
    /// Entries of the chunk were trimmed (past the journal's retention): the edge fetches
    /// segments.
    Gone,
}

impl Gate {
    /// Page `page` of chunk `chunk` (chunks of `width_ms` ms of Redis's clock) of generation
    /// `generation`'s journal, sealed first when it is due. A chunk is cut into pages of
    /// [`MAX_PAGE_HASHES`] hashes, fixed once sealed.
    pub async fn sealed_page(
        &self,
        name: &str,
        generation: u64,
        width_ms: u64,
        chunk: u64,
        page: u32,
    ) -> Result<Result<Vec<u8>, Refusal>, AppError> {
        let clock = chunk_clock(width_ms)?;
        let (state, meta) = self.journaled_generation(name, generation).await?;
        let read = match self.sealed_chunk(name, meta, &clock, chunk, true).await? {
            Ok(read) => read,
            Err(refusal) => return Ok(Err(refusal)),
        };
        // An entry at or after the chunk's start may have been trimmed or deleted: the chunk
        // may miss some.
        if !read.whole_from_start || read.max_deleted_ms >= clock.start_ms(chunk) {
            return Ok(Err(Refusal::Gone));
        }
        let pages = pages_for(read.hashes.len() as u64);
        if page >= pages {
            return Err(AppError::NotFound(format!("chunk {chunk} of generation {generation} has {pages} page(s)")));
        }
        let first = page as usize * MAX_PAGE_HASHES as usize;
        let hashes = &read.hashes[first..read.hashes.len().min(first + MAX_PAGE_HASHES as usize)];
        let header = PageHeader {
            generation,
            seed: meta.params.seed,
            chunk,
            width_ms: width_ms as u32,
            page,
            pages,
            read_at_ms: read.redis_now_ms,
            superseded_by: state.readable().map(|m| m.generation).filter(|g| *g != generation),
        };
        Ok(Ok(encode_page(&header, hashes)))
    }

    /// Segment `index` of generation `generation` at epoch `epoch` (a chunk of `width_ms`),
    /// encoded: its bits read once the chunk is sealed, so they hold every write of every chunk
    /// up to it (an add sets its bits before it appends its entry, in one script). They may
    /// hold later writes too, which changes nothing: bits only get set within a generation, so
    /// any copy read after the seal is a right answer for the URL, and caches may keep any one.
    pub async fn epoch_segment(
        &self,
        name: &str,
        generation: u64,
        width_ms: u64,
        epoch: u64,
        index: u32,
    ) -> Result<Result<Vec<u8>, Refusal>, AppError> {
        let clock = chunk_clock(width_ms)?;
        let (_, meta) = self.journaled_generation(name, generation).await?;
        if let Err(refusal) = self.sealed_chunk(name, meta, &clock, epoch, false).await? {
            return Ok(Err(refusal));
        }
        if index >= meta.params.segment_count {
            return Err(AppError::NotFound(format!(
                "generation {generation} of filter {name:?} has {} segments",
                meta.params.segment_count
            )));
        }
        let bits = self.store.edge_feed.segment(name, meta, index).await.map_err(AppError::FilterRead)?;
        // The header's version is the epoch's end, ms of Redis's clock (higher is newer, as
        // versions are, whatever the chunk width): the body says through when it holds every
        // write, so a follower handed another epoch's copy of the segment (a cache answering
        // with another URL's body, of any width) can refuse one older than it asked for.
        let wire = encode_segment(&meta.params, generation, index, clock.end_ms(epoch), &bits.payload)
            .map_err(|e| AppError::FilterRead(FilterUnavailable::Error(e.to_string())))?;
        Ok(Ok(wire))
    }

    /// The current document of the filter's feed in chunks of `width_ms`, for slot `slot`
    /// (`bloomgate_filter::feed_current`): the readable generation, and as its epoch the last
    /// chunk before the slot began, sealed. A slot away from this origin's clock is refused, so no cache keeps the
    /// document under a slot still to come.
    pub async fn feed_current(
        &self,
        name: &str,
        width_ms: u64,
        slot: u64,
    ) -> Result<Result<FeedCurrent, Refusal>, AppError> {
        let def = self.def(name).await?;
        let clock = chunk_clock(width_ms)?;
        let now = now_ms();
        if slot_standing(slot, now) != SlotStanding::Current {
            return Err(AppError::BadRequest(format!(
                "slot {slot} is not the current one ({}): ask for the slot of now",
                slot_of(now)
            )));
        }
        let meta = match self.store.edge_feed.state(name).await.map_err(AppError::FilterRead)?.readable_or_why() {
            Ok(meta) if meta.journal => meta,
            Ok(_) => {
                return Err(AppError::NotFound(format!("filter {name:?} keeps no insert journal: no shared feed")))
            }
            Err(FilterUnavailable::Dropped) => return Err(AppError::UnknownFilter(name.into())),
            Err(why) => return Err(AppError::FilterRead(why)),
        };
        // The epoch is quantised to the slot: the last chunk before the slot began, so every
        // document of a slot names one epoch and every isolate starting cold in it asks for the
        // same segment URLs (the price: up to a slot of chunks to follow from it). Never a chunk
        // Redis's clock may not have passed (this origin's clock less two widths); earlier ones
        // when Redis's clock is behind this origin's, or stepped back.
        let slot_start = slot.saturating_mul(CURRENT_SLOT_MS);
        let newest = clock.chunk_of(slot_start.min(now.saturating_sub(2 * width_ms))).saturating_sub(1);
        let mut refusal = Refusal::Unsealable;
        for epoch in (newest.saturating_sub(3)..=newest).rev() {
            match self.sealed_chunk(name, meta, &clock, epoch, false).await? {
                Ok(read) => {
                    return Ok(Ok(FeedCurrent {
                        format: FEED_CURRENT_FORMAT,
                        filter: name.into(),
                        key_format: def.key_format,
                        generation: meta.generation,
                        params: meta.params,
                        width_ms,
                        epoch,
                        read_at_ms: read.redis_now_ms,
                    }))
                }
                Err(why) => refusal = why,
            }
        }
        Ok(Err(refusal))
    }

    /// The filter's state and its generation `generation`, which must keep an insert journal.
    async fn journaled_generation(&self, name: &str, generation: u64) -> Result<(FilterState, Generation), AppError> {
        self.def(name).await?;
        let state = self.store.edge_feed.state(name).await.map_err(AppError::FilterRead)?;
        match state.generation(generation).filter(|m| m.journal) {
            Some(meta) => Ok((state, meta)),
            None => Err(AppError::NotFound(format!(
                "filter {name:?} has no generation {generation} with an insert journal (active generation {:?})",
                state.active.map(|m| m.generation)
            ))),
        }
    }

    /// Chunk `chunk` of `meta`'s journal, sealed first when it is due; its hashes only
    /// `with_entries`.
    async fn sealed_chunk(
        &self,
        name: &str,
        meta: Generation,
        clock: &ChunkClock,
        chunk: u64,
        with_entries: bool,
    ) -> Result<Result<SealedRead, Refusal>, AppError> {
        let (start, end) = (clock.start_ms(chunk), clock.end_ms(chunk));
        let read = self
            .store
            .edge_feed
            .read_sealed_chunk(name, meta, start, end, with_entries)
            .await
            .map_err(AppError::FilterRead)?;
        let stepped: Vec<_> = read.stepped_back.into_iter().collect();
        Ok(match seal(clock, chunk, read.redis_now_ms, read.last_id_ms, &stepped) {
            Seal::Sealed => Ok(read),
            Seal::Unsealable => Err(Refusal::Unsealable),
            Seal::Open { ready_in_ms } => Err(Refusal::Open { retry_after_ms: ready_in_ms }),
            // The script seals a chunk whose end the clock passed; one it did not is asked again.
            Seal::SealNow => Err(Refusal::Open { retry_after_ms: clock.width_ms() }),
        })
    }
}

/// Chunks of `width_ms`, or why that width is refused.
fn chunk_clock(width_ms: u64) -> Result<ChunkClock, AppError> {
    ChunkClock::new(width_ms).map_err(|e| AppError::BadRequest(e.to_string()))
}
