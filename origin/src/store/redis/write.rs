//! What a write asks of Redis: the keys' bits and their journal entry, one script on a single
//! Redis (`scripts/add.lua`); on a cluster one script per touched segment, then the entry, then
//! `WAIT` for replicas. And the delete counts every origin's deletes add to.

use super::cluster::ClusterLink;
use super::keys::{deletes_key, journal_key, segment_keys};
use super::{Backend, RedisFilterStore};
use crate::store::{FilterMeta, FilterUnavailable, WriteStore};
use async_trait::async_trait;
use bloomgate_filter::block::{probe_positions, BLOCK_BITS};
use bloomgate_filter::journal::{encode_hash, HASH_BYTES};
use bloomgate_filter::KeyHash;
use redis::{AsyncCommands, ScriptInvocation};
use std::collections::BTreeMap;

#[async_trait]
impl WriteStore for RedisFilterStore {
    async fn count_deletes(&self, filter: &str, meta: FilterMeta, n: u64) -> Result<(), FilterUnavailable> {
        let key = deletes_key(filter, meta.generation);
        self.call(self.write_timeout, Some(meta.incarnation), |mut c| async move { c.incr::<_, _, ()>(key, n).await })
            .await
    }

    /// One script on a single Redis. On a cluster, where each segment is its own slot: one
    /// script per touched segment, all answered before the journal entry is appended in the
    /// filter's slot — an entry is still never seen without its bits, and an add whose bits or
    /// entry failed is not acknowledged (bits set without an entry only add false positives;
    /// the caller retries). Then, with replicas, `WAIT` until they have it all.
    async fn add(&self, filter: &str, meta: FilterMeta, hashes: Vec<KeyHash>) -> Result<(), FilterUnavailable> {
        let mut by_segment: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
        let mut entry = Vec::with_capacity(hashes.len() * HASH_BYTES);
        for hash in &hashes {
            let at = meta.params.locate(hash);
            let base = u64::from(at.block_in_segment) * u64::from(BLOCK_BITS);
            let (positions, n) = probe_positions(hash.probe_bits, meta.params.k);
            by_segment.entry(at.segment).or_default().extend(positions[..n].iter().map(|p| base + u64::from(*p)));
            entry.extend_from_slice(&encode_hash(hash));
        }
        let journal = meta.journal.then_some(entry);
        let added: i64 = match &self.backend {
            Backend::Single(_) => {
                let call = self.add_call(filter, meta, by_segment.iter(), journal);
                self.run(self.write_timeout, Some(meta.incarnation), call).await?
            }
            Backend::Cluster(cluster) => {
                let bits = by_segment.iter().map(|segment| {
                    let call = self.add_call(filter, meta, std::iter::once(segment), None);
                    self.run::<i64>(self.write_timeout, Some(meta.incarnation), call)
                });
                futures::future::try_join_all(bits).await?;
                let added = match journal {
                    Some(entry) => {
                        let call = self.add_call(filter, meta, std::iter::empty(), Some(entry));
                        self.run(self.write_timeout, Some(meta.incarnation), call).await?
                    }
                    None => 1,
                };
                self.wait_for_replicas(cluster).await?;
                added
            }
        };
        match added {
            1 | 2 => Ok(()),
            // The journal is gone (lost with its keys): the recovery check rebuilds.
            _ => Err(FilterUnavailable::SegmentMissing(0)),
        }
    }
}

impl RedisFilterStore {
    /// An `scripts/add.lua` call setting the bits of `segments` (`segment → bit offsets`), then, with
    /// `entry`, appending it to the generation's journal.
    pub(super) fn add_call<'a>(
        &'a self,
        filter: &str,
        meta: FilterMeta,
        segments: impl Iterator<Item = (&'a u32, &'a Vec<u64>)>,
        entry: Option<Vec<u8>>,
    ) -> ScriptInvocation<'a> {
        let mut call = self.scripts.add.prepare_invoke();
        let oldest_kept = crate::clock::now_ms().saturating_sub(self.journal.max_age.as_millis() as u64);
        call.arg(u8::from(entry.is_some())).arg(self.journal.max_entries).arg(oldest_kept);
        call.arg(entry.as_deref().unwrap_or_default());
        for (segment, offsets) in segments {
            let (bits, ver) = segment_keys(filter, meta.generation, *segment);
            call.key(bits).key(ver).arg(offsets.len());
            for offset in offsets {
                call.arg(*offset);
            }
        }
        if entry.is_some() {
            call.key(journal_key(filter, meta.generation));
        }
        call
    }

    /// Waits until `min_replicas_acked` replicas of every master (at most as many as the
    /// fewest a master has) have everything sent so far; fewer in time fails the add.
    pub(super) async fn wait_for_replicas(&self, cluster: &ClusterLink) -> Result<(), FilterUnavailable> {
        let wanted = i64::from(self.min_replicas_acked.min(cluster.topology()?.fewest_replicas));
        if wanted == 0 {
            return Ok(());
        }
        let wait_ms = (self.write_timeout / 2).as_millis() as u64;
        // Sent to every master; the answer is the fewest replicas any of them reached.
        let acked: i64 = self
            .call(self.write_timeout, None, |mut c| async move {
                redis::cmd("WAIT").arg(wanted).arg(wait_ms).query_async(&mut c).await
            })
            .await?;
        if acked < wanted {
            return Err(FilterUnavailable::Error(format!(
                "only {acked} of {wanted} Redis replicas confirmed the add within {wait_ms} ms: not acknowledged, retry the write"
            )));
        }
        Ok(())
    }
}
