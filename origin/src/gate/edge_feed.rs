//! What the edge fetches: the manifest, chunks of a generation's insert journal, and
//! segments, each of a generation whose bits are in this incarnation of the filter store.

use super::Gate;
use crate::error::AppError;
use crate::store::{FilterState, FilterUnavailable, Generation, JournalPage, JournalRead};
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
