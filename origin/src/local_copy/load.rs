//! Loading a generation's copy: the journal's head first, then every segment.

use crate::store::{CopySource, FilterUnavailable, Generation, StoreResult};
use bloomgate_filter::{BloomFilter, JournalPosition};
use futures::{StreamExt, TryStreamExt};

/// Segments read at once while loading.
const SEGMENTS_AT_ONCE: usize = 4;

/// The copy's bits and the journal position they are current to. The head is read before any
/// segment: every entry up to it had its bits set before it was appended, so segments read
/// after hold them all (and perhaps later ones: bits only ever get set, so more is harmless).
pub async fn load(
    store: &dyn CopySource,
    filter: &str,
    meta: Generation,
) -> StoreResult<(BloomFilter, JournalPosition)> {
    if !meta.journal {
        return Err(FilterUnavailable::Error(
            "the generation keeps no insert journal, so a copy could not be kept current".into(),
        ));
    }
    let head = store.journal_head(filter, meta).await?;
    let bits = BloomFilter::try_new(meta.params).map_err(|e| FilterUnavailable::Error(e.to_string()))?;
    futures::stream::iter(0..meta.params.segment_count)
        .map(|index| async move { store.segment(filter, meta, index).await.map(|s| (index, s.payload)) })
        .buffer_unordered(SEGMENTS_AT_ONCE)
        .try_for_each(|(index, payload)| {
            let merged = bits.merge_segment_payload_shared(index, &payload);
            async move {
                match merged {
                    true => Ok(()),
                    false => Err(FilterUnavailable::SegmentMissing(index)),
                }
            }
        })
        .await?;
    Ok((bits, head))
}
