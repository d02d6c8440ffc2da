//! What stats and the recovery check read: set bits (whole or sampled), delete counts, memory,
//! the journal's size, a rebuild's published progress and lease, whether every segment is whole.

use super::keys::{deletes_key, journal_key, lease_key, parse_version, progress_key, segment_keys};
use super::{Backend, RedisFilterStore};
use crate::build_progress::BuildProgress;
use crate::store::{FilterUnavailable, Generation, JournalSize, StatsStore, StoreResult};
use async_trait::async_trait;
use redis::AsyncCommands;

#[async_trait]
impl StatsStore for RedisFilterStore {
    async fn deletes(&self, filter: &str, meta: Generation) -> StoreResult<u64> {
        let key = deletes_key(filter, meta.generation);
        let n: Option<u64> = self.call(self.write_timeout, None, |mut c| async move { c.get(key).await }).await?;
        Ok(n.unwrap_or(0))
    }

    async fn progress(&self, filter: &str) -> StoreResult<Option<BuildProgress>> {
        let key = progress_key(filter);
        let json: Option<String> = self.call(self.write_timeout, None, |mut c| async move { c.get(key).await }).await?;
        // Unreadable progress is no progress: it is advisory.
        Ok(json.and_then(|j| serde_json::from_str(&j).ok()))
    }

    async fn segments_intact(&self, filter: &str, meta: Generation) -> StoreResult<()> {
        let filter = filter.to_owned();
        let keys = |index| segment_keys(&filter, meta.generation, index);
        let answers: Vec<(u64, Option<String>)> = match self.backend {
            Backend::Single(_) => {
                let mut pipe = redis::pipe();
                for index in 0..meta.params.segment_count {
                    let (bits, ver) = keys(index);
                    pipe.strlen(bits).get(ver);
                }
                self.call(self.write_timeout, Some(meta.incarnation), |mut c| async move {
                    let flat: Vec<redis::Value> = pipe.query_async(&mut c).await?;
                    flat.chunks(2)
                        .map(|pair| {
                            let len: u64 = redis::from_redis_value_ref(&pair[0])?;
                            let ver: Option<String> = redis::from_redis_value_ref(&pair[1])?;
                            Ok((len, ver))
                        })
                        .collect()
                })
                .await?
            }
            // Each segment is in its own slot: one guarded read each, all at once.
            Backend::Cluster(_) => {
                let reads = (0..meta.params.segment_count).map(|index| {
                    let (bits, ver) = keys(index);
                    let mut call = self.scripts.segment_size.key(bits);
                    call.key(ver);
                    self.run(self.write_timeout, Some(meta.incarnation), call)
                });
                futures::future::try_join_all(reads).await?
            }
        };
        let size = meta.params.segment_bytes();
        if let Some(index) = answers.into_iter().position(|(len, ver)| len != size || parse_version(ver).is_none()) {
            return Err(FilterUnavailable::SegmentMissing(index as u32));
        }
        if !meta.journal {
            return Ok(());
        }
        let journal = journal_key(&filter, meta.generation);
        let kind: String = self
            .call(self.write_timeout, Some(meta.incarnation), |mut c| async move {
                redis::cmd("TYPE").arg(journal).query_async(&mut c).await
            })
            .await?;
        if kind == "stream" {
            Ok(())
        } else {
            Err(FilterUnavailable::SegmentMissing(0))
        }
    }

    async fn lease_holder(&self, filter: &str) -> StoreResult<Option<String>> {
        let key = lease_key(filter);
        self.call(self.write_timeout, None, |mut c| async move { c.get(key).await }).await
    }

    async fn count_ones(&self, filter: &str, meta: Generation) -> StoreResult<u64> {
        let filter = filter.to_owned();
        let (ones, _) = self.count_sampled(&filter, meta, meta.params.segment_count).await?;
        Ok(ones)
    }

    async fn count_ones_sampled(&self, filter: &str, meta: Generation, max_segments: u32) -> StoreResult<(u64, u32)> {
        let filter = filter.to_owned();
        self.count_sampled(&filter, meta, max_segments).await
    }

    async fn memory_bytes(&self, _filter: &str, meta: Generation) -> StoreResult<Option<u64>> {
        Ok(Some(meta.params.total_bytes()))
    }

    async fn journal_size(&self, filter: &str, meta: Generation) -> StoreResult<JournalSize> {
        let filter = filter.to_owned();
        let (_, entries) = self.head_of(&filter, meta).await?;
        let key = journal_key(&filter, meta.generation);
        let bytes: Option<u64> = self
            .call(self.write_timeout, None, |mut c| async move {
                redis::cmd("MEMORY").arg("USAGE").arg(key).query_async(&mut c).await
            })
            .await
            .ok()
            .flatten();
        Ok(JournalSize { entries, bytes })
    }
}

impl RedisFilterStore {
    pub(super) async fn count_sampled(&self, filter: &str, meta: Generation, max: u32) -> StoreResult<(u64, u32)> {
        let indices: Vec<u32> = sample_indices(meta.params.segment_count, max).collect();
        let bits = |index| segment_keys(filter, meta.generation, index).0;
        let counts: Vec<u64> =
            match self.backend {
                Backend::Single(_) => {
                    let mut pipe = redis::pipe();
                    for index in &indices {
                        pipe.cmd("BITCOUNT").arg(bits(*index));
                    }
                    self.call(self.write_timeout, Some(meta.incarnation), |mut c| async move {
                        pipe.query_async(&mut c).await
                    })
                    .await?
                }
                // Each segment is in its own slot; counts are statistics, read without the guard.
                Backend::Cluster(_) => {
                    let counts = indices.iter().map(|index| {
                        let key = bits(*index);
                        self.call(self.write_timeout, Some(meta.incarnation), |mut c| async move {
                            redis::cmd("BITCOUNT").arg(key).query_async::<u64>(&mut c).await
                        })
                    });
                    futures::future::try_join_all(counts).await?
                }
            };
        Ok((counts.iter().sum(), indices.len() as u32))
    }
}

/// Indices of at most `max` segments of `count`, spread evenly from the first.
fn sample_indices(count: u32, max: u32) -> impl Iterator<Item = u32> {
    let step = count.div_ceil(max.max(1)).max(1);
    (0..count).step_by(step as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_spread_over_the_generation() {
        assert_eq!(sample_indices(5, 16).collect::<Vec<_>>(), [0, 1, 2, 3, 4]);
        let sampled: Vec<u32> = sample_indices(1907, 16).collect();
        assert!(sampled.len() <= 16 && sampled.len() >= 15, "{sampled:?}");
        assert!(*sampled.last().unwrap() > 1700);
    }
}
