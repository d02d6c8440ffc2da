//! What a lookup asks of Redis: one block of bits (the filter's state is read in `state`). The
//! lookup timeout applies: slower is "unavailable", and the lookup falls through.

use super::keys::segment_keys;
use super::RedisFilterStore;
use crate::store::{FilterUnavailable, Generation, LookupStore, StoreResult};
use async_trait::async_trait;
use bloomgate_filter::block::{bytes_contain, probe_mask, BLOCK_BYTES};
use bloomgate_filter::KeyHash;

#[async_trait]
impl LookupStore for RedisFilterStore {
    async fn may_contain(&self, filter: &str, meta: Generation, hash: KeyHash) -> StoreResult<bool> {
        let at = meta.params.locate(&hash);
        let (bits, _) = segment_keys(filter, meta.generation, at.segment);
        let start = at.byte_offset_in_segment() as isize;
        let end = start + BLOCK_BYTES as isize - 1;
        // A script, so its guard checks, atomically with the read, that these are the bits of
        // the process and history the generation was made on (a plain read could not refuse a
        // promoted replica, nor a master that was demoted and resynchronised meanwhile).
        let mut invocation = self.scripts.read_block.key(bits);
        invocation.arg(start).arg(end);
        let block: Vec<u8> = self.run(self.timeout, Some(meta.incarnation), invocation).await?;
        // A missing key reads as "" (not zeros) through GETRANGE: that, or a short string,
        // is a missing segment, never "not seen".
        let block: [u8; BLOCK_BYTES] = block.try_into().map_err(|_| FilterUnavailable::SegmentMissing(at.segment))?;
        Ok(bytes_contain(&block, &probe_mask(hash.probe_bits, meta.params.k)))
    }
}
