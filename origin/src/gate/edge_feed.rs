//! What the edge fetches: the manifest, chunks of a generation's insert journal, and
//! segments, each of a generation whose bits are in this incarnation of the filter store.

use super::Gate;
use crate::error::AppError;
use crate::store::{FilterState, FilterUnavailable, Generation, JournalPage, JournalRead};
use bloomgate_filter::sealed_chunk::{seal, ChunkClock, Seal};
use bloomgate_filter::sealed_page::{encode_page, pages_for, PageHeader, MAX_PAGE_HASHES};
use bloomgate_filter::{encode_journal, encode_segment, encode_segment_at, JournalPosition, Manifest};

/// A chunk of a generation's insert journal as the edge receives it.
///
/// When the chunk ends at the head and its generation is the filter's readable one, it says
/// all a manifest would (the generation's params and key format do not change): the edge takes
/// it as its next manifest, one request per refresh instead of a manifest and a chunk.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JournalChunk {
    /// The chunk, encoded (`bloomgate_filter::journal`).
    pub wire: Vec<u8>,
    /// Entries the journal had when read: the chunk ends at the head exactly when its `to` is
    /// this.
    pub head: u64,
    /// The generation a manifest would have named, read after the request arrived and before
    /// the entries; None when no generation is readable.
    pub readable_generation: Option<u64>,
}

/// What a request for a page of a sealed journal chunk gets (`Gate::sealed_page`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SealedPage {
    /// The page, encoded (`bloomgate_filter::sealed_page`): immutable.
    Page(Vec<u8>),
    /// Not sealed yet (Redis's clock has not reached its end): ask again in this many ms.
    Open {
        /// Until its end, by Redis's clock.
        retry_after_ms: u64,
    },
    /// Redis's clock stepped back across the chunk's end: it proves nothing, and the edge
    /// keeps itself fresh from the journal instead.
    Unsealable,
    /// Entries of the chunk were trimmed (past the journal's retention): the edge fetches
    /// segments.
    Gone,
}

impl Gate {
    /// The filter's state, read fresh.
    async fn state(&self, name: &str) -> Result<FilterState, AppError> {
        self.store.edge_feed.state(name).await.map_err(AppError::FilterRead)
    }

    /// The generation lookups read, read fresh.
    async fn active(&self, name: &str) -> Result<Generation, AppError> {
        match self.state(name).await?.readable_or_why() {
            Ok(meta) => Ok(meta),
            Err(FilterUnavailable::Dropped) => Err(AppError::UnknownFilter(name.into())),
            Err(why) => Err(AppError::FilterRead(why)),
        }
    }

    /// The manifest the edge reads: params, key format, and what a held segment must be current
    /// to. With an insert journal that is the journal's head alone (an edge's copies name their
    /// own positions, so listing every segment's version would only cost bytes on every
    /// refresh); without one, every segment's version.
    pub async fn manifest(&self, name: &str) -> Result<Manifest, AppError> {
        let def = self.def(name).await?;
        let meta = self.active(name).await?;
        // Every segment must still be readable: a lost one (evicted, deleted) makes the manifest
        // unavailable, so no edge starts from a generation the recovery check will replace.
        let versions = self.store.edge_feed.segment_versions(name, meta).await.map_err(AppError::FilterRead)?;
        // Read after the request arrived: it covers every key acknowledged before.
        let (segment_versions, journal) = match meta.journal {
            true => {
                (Vec::new(), Some(self.store.edge_feed.journal_head(name, meta).await.map_err(AppError::FilterRead)?))
            }
            false => (versions, None),
        };
        Ok(Manifest {
            format: bloomgate_filter::MANIFEST_FORMAT,
            filter: name.into(),
            key_format: def.key_format,
            generation: meta.generation,
            params: meta.params,
            segment_versions,
            journal,
        })
    }

    /// Up to `max_entries` entries of generation `generation`'s insert journal after `after`,
    /// encoded for the edge, with what lets the edge take the chunk as its next manifest; None
    /// when they are no longer kept (the edge fetches segments).
    pub async fn journal(
        &self,
        name: &str,
        generation: u64,
        after: JournalPosition,
        max_entries: u32,
    ) -> Result<Option<JournalChunk>, AppError> {
        self.def(name).await?;
        // Read after the request arrived and before the entries, as a manifest reads its head.
        let state = self.state(name).await?;
        let Some(meta) = state.generation(generation) else {
            return Err(AppError::NotFound(format!("filter {name:?} has no generation {generation}")));
        };
        if !meta.journal {
            return Err(AppError::NotFound(format!(
                "generation {generation} of filter {name:?} keeps no insert journal (it was named by an origin with journal_enabled = false)"
            )));
        }
        match self
            .store
            .edge_feed
            .read_journal(name, meta, JournalPage { after, max_entries })
            .await
            .map_err(AppError::FilterRead)?
        {
            JournalRead::Reset => Ok(None),
            JournalRead::Entries { to, entries, head, .. } => Ok(Some(JournalChunk {
                wire: encode_journal(meta.generation, meta.params.seed, after.added, to, &entries),
                head,
                readable_generation: state.readable().map(|m| m.generation),
            })),
        }
    }

    /// Page `page` of chunk `chunk` (chunks of `width_ms` ms of Redis's clock) of generation
    /// `generation`'s journal, sealed first when it is due (docs/design.md, "The edge at many
    /// isolates"). A chunk is cut into pages of [`MAX_PAGE_HASHES`] hashes, fixed once sealed.
    pub async fn sealed_page(
        &self,
        name: &str,
        generation: u64,
        width_ms: u64,
        chunk: u64,
        page: u32,
    ) -> Result<SealedPage, AppError> {
        self.def(name).await?;
        let clock = ChunkClock::new(width_ms).map_err(|e| AppError::BadRequest(e.to_string()))?;
        let state = self.state(name).await?;
        let Some(meta) = state.generation(generation).filter(|m| m.journal) else {
            return Err(AppError::NotFound(format!(
                "filter {name:?} has no generation {generation} with an insert journal (active generation {:?})",
                state.active.map(|m| m.generation)
            )));
        };
        let (start, end) = (clock.start_ms(chunk), clock.end_ms(chunk));
        let read =
            self.store.edge_feed.read_sealed_chunk(name, meta, start, end).await.map_err(AppError::FilterRead)?;
        let stepped: Vec<_> = read.stepped_back.into_iter().collect();
        match seal(&clock, chunk, read.redis_now_ms, read.last_id_ms, &stepped) {
            Seal::Sealed => {}
            Seal::Unsealable => return Ok(SealedPage::Unsealable),
            Seal::Open { ready_in_ms } => return Ok(SealedPage::Open { retry_after_ms: ready_in_ms }),
            // The script seals a chunk whose end the clock passed; one it did not is asked again.
            Seal::SealNow => return Ok(SealedPage::Open { retry_after_ms: clock.width_ms() }),
        }
        // An entry at or after the chunk's start may have been trimmed or deleted: the chunk
        // may miss some.
        if !read.whole_from_start || read.max_deleted_ms >= start {
            return Ok(SealedPage::Gone);
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
        Ok(SealedPage::Page(encode_page(&header, hashes)))
    }

    /// One encoded segment of the active generation, or of the one being built or just
    /// replaced, while its bits are in this incarnation of the filter store: (version, wire
    /// bytes). Never a segment of another incarnation, so no segment identity
    /// (generation, index, version) ever names two different bit sets.
    pub async fn segment(&self, name: &str, generation: u64, index: u32) -> Result<(u64, Vec<u8>), AppError> {
        self.def(name).await?;
        let state = self.state(name).await?;
        let Some(meta) = state.generation(generation).filter(|m| index < m.params.segment_count) else {
            return Err(AppError::NotFound(format!(
                "filter {name:?} has no segment {index} in generation {generation} (active generation {:?})",
                state.active.map(|m| m.generation)
            )));
        };
        // The journal's head first, then the bits: every entry up to the head had its bits set
        // before it was appended, so the bits read after hold them all.
        let head = match meta.journal {
            true => Some(self.store.edge_feed.journal_head(name, meta).await.map_err(AppError::FilterRead)?),
            false => None,
        };
        let bits = self.store.edge_feed.segment(name, meta, index).await.map_err(AppError::FilterRead)?;
        let wire = match head {
            Some(head) => encode_segment_at(&meta.params, generation, index, bits.version, head, &bits.payload),
            None => encode_segment(&meta.params, generation, index, bits.version, &bits.payload),
        }
        .map_err(|e| AppError::FilterRead(FilterUnavailable::Error(e.to_string())))?;
        Ok((bits.version, wire))
    }
}
