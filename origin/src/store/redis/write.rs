//! What a write asks of Redis: the keys' bits and their journal entry, one script on a single
//! Redis (`scripts/add.lua`); on a cluster one script per touched segment, then the entry, then
//! `WAIT` for replicas. And the delete counts every origin's deletes add to.

use super::conn::RedisConn;
use super::keys::{clock_steps_key, deletes_key, journal_key, segment_keys};
use super::{Backend, RedisFilterStore};
use crate::store::{FilterUnavailable, Generation, StoreResult, WriteStore};
use async_trait::async_trait;
use bloomgate_filter::block::{probe_positions, BLOCK_BITS};
use bloomgate_filter::journal::{encode_hash, HASH_BYTES};
use bloomgate_filter::KeyHash;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::{AsyncCommands, ScriptInvocation};
use std::collections::BTreeMap;

#[async_trait]
impl WriteStore for RedisFilterStore {
    async fn count_deletes(&self, filter: &str, meta: Generation, n: u64) -> StoreResult<()> {
        let key = deletes_key(filter, meta.generation);
        self.call(self.write_timeout, Some(meta.incarnation), |mut c| async move { c.incr::<_, _, ()>(key, n).await })
            .await
    }

    /// One script on a single Redis. On a cluster, where each segment is its own slot: one
    /// script per touched segment, all answered before the journal entry is appended in the
    /// filter's slot — an entry is still never seen without its bits, and an add whose bits or
    /// entry failed is not acknowledged (bits set without an entry only add false positives;
    /// the caller retries). Then, with replicas, `WAIT` on every master the add went to until
    /// its replicas have it all.
    async fn add(&self, filter: &str, meta: Generation, hashes: Vec<KeyHash>) -> StoreResult<()> {
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
        let added = match &self.backend {
            Backend::Single(_) => {
                let call = self.add_call(filter, meta, by_segment.iter(), journal);
                let (added, _, _): Added = self.run(self.write_timeout, Some(meta.incarnation), call).await?;
                added
            }
            Backend::Cluster(_) => {
                let bits = by_segment.iter().map(|segment| {
                    let call = self.add_call(filter, meta, std::iter::once(segment), None);
                    let slot_key = segment_keys(filter, meta.generation, *segment.0).0;
                    async move {
                        let added: Added = self.run(self.write_timeout, Some(meta.incarnation), call).await?;
                        Ok::<_, FilterUnavailable>((slot_key, added))
                    }
                });
                let mut reached = futures::future::try_join_all(bits).await?;
                let added = match journal {
                    Some(entry) => {
                        let call = self.add_call(filter, meta, std::iter::empty(), Some(entry));
                        let added: Added = self.run(self.write_timeout, Some(meta.incarnation), call).await?;
                        reached.push((journal_key(filter, meta.generation), added.clone()));
                        added.0
                    }
                    None => 1,
                };
                self.wait_for_replicas(&reached).await?;
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

/// What `scripts/add.lua` answers: its status, then the replicas connected to the process that
/// ran it, and that process's identity.
type Added = (i64, u32, String);

impl RedisFilterStore {
    /// An `scripts/add.lua` call setting the bits of `segments` (`segment → bit offsets`), then, with
    /// `entry`, appending it to the generation's journal.
    pub(super) fn add_call<'a>(
        &'a self,
        filter: &str,
        meta: Generation,
        segments: impl Iterator<Item = (&'a u32, &'a Vec<u64>)>,
        entry: Option<Vec<u8>>,
    ) -> ScriptInvocation<'a> {
        let mut call = self.scripts.add.prepare_invoke();
        call.arg(u8::from(entry.is_some())).arg(self.journal.max_entries).arg(self.journal.max_age.as_millis() as u64);
        call.arg(entry.as_deref().unwrap_or_default());
        for (segment, offsets) in segments {
            let (bits, ver) = segment_keys(filter, meta.generation, *segment);
            call.key(bits).key(ver).arg(offsets.len());
            for offset in offsets {
                call.arg(*offset);
            }
        }
        if entry.is_some() {
            call.key(journal_key(filter, meta.generation)).key(clock_steps_key(filter, meta.generation));
        }
        call
    }

    /// Waits until `min_replicas_acked` replicas of each master an add reached (each given by a
    /// key of its slot, with the replicas it had connected when it ran the add, and its
    /// identity) have everything sent to it so far; fewer in time fails the add. A master is
    /// asked for at most as many as it has: one whose replica was just promoted away does not
    /// stop the writes, nor does it stop the others' waits.
    pub(super) async fn wait_for_replicas(&self, reached: &[(String, Added)]) -> StoreResult<()> {
        let wait_ms = (self.write_timeout / 2).as_millis() as u64;
        let waits = replica_waits(reached, self.min_replicas_acked).into_iter().map(|(slot_key, wanted)| {
            let route = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(Route::with_key(
                slot_key,
                SlotAddr::Master,
            )));
            async move {
                let acked: i64 = self
                    .call(self.write_timeout, None, |c| async move {
                        let mut wait = redis::cmd("WAIT");
                        wait.arg(wanted).arg(wait_ms);
                        match c {
                            RedisConn::Cluster(mut c) => Ok(redis::from_redis_value(c.route_command(wait, route).await?)?),
                            mut c => wait.query_async(&mut c).await,
                        }
                    })
                    .await?;
                match acked >= wanted {
                    true => Ok(()),
                    false => Err(FilterUnavailable::Error(format!(
                        "only {acked} of {wanted} Redis replicas confirmed the add within {wait_ms} ms: not acknowledged, retry the write"
                    ))),
                }
            }
        });
        futures::future::try_join_all(waits).await.map(|_| ())
    }
}

/// The `WAIT`s an add owes: per master it reached (told apart by identity), one key of its slot
/// to route by and how many replicas to wait for, `min_replicas_acked` capped at the replicas
/// that master had. Masters with none to wait for are left out. Capped per master, not at the
/// fewest any master has: one replica-less master must not turn the wait off for the others.
fn replica_waits(reached: &[(String, Added)], min_replicas_acked: u32) -> Vec<(&str, i64)> {
    let mut masters: BTreeMap<&str, (&str, i64)> = BTreeMap::new();
    for (slot_key, (_, replicas, identity)) in reached {
        let wanted = i64::from(min_replicas_acked.min(*replicas));
        masters.entry(identity.as_str()).or_insert((slot_key.as_str(), wanted));
    }
    masters.into_values().filter(|(_, wanted)| *wanted > 0).collect()
}

#[cfg(test)]
mod tests {
    use super::replica_waits;

    fn reached(slot_key: &str, replicas: u32, master: &str) -> (String, super::Added) {
        (slot_key.to_owned(), (1, replicas, master.to_owned()))
    }

    #[test]
    fn a_master_without_replicas_does_not_turn_off_the_others_wait() {
        let adds = [reached("{f:1:0}", 1, "a"), reached("{f:1:1}", 0, "b"), reached("{f:1:2}", 2, "c")];
        assert_eq!(replica_waits(&adds, 1), [("{f:1:0}", 1), ("{f:1:2}", 1)]);
        assert_eq!(replica_waits(&adds, 2), [("{f:1:0}", 1), ("{f:1:2}", 2)], "each capped at its own replicas");
        assert!(replica_waits(&adds, 0).is_empty(), "the wait off");
    }

    #[test]
    fn one_wait_per_master_however_many_of_its_slots_the_add_reached() {
        let adds = [reached("{f:1:0}", 1, "a"), reached("{f:1:1}", 1, "a"), reached("{f:jnl}", 1, "a")];
        assert_eq!(replica_waits(&adds, 1), [("{f:1:0}", 1)]);
    }
}
