//! The shared filter in Redis: plain bitmaps, one string per segment, plus a version counter
//! per segment and one metadata key per filter naming the active generation.
//!
//! Keys (hash tags keep a segment's bits and version in one Cluster slot, while different
//! segments spread over slots):
//!
//! ```text
//! bg:{<filter>}:meta                 JSON FilterState: active, building, previous generations
//! bg:{<filter>}:lease                owner of the rebuild lease (with expiry)
//! bg:{<filter>}:deletes:<gen>        keys deleted whose bits generation <gen> still holds
//! bg:{<filter>}:progress             JSON BuildProgress of a running rebuild (expires)
//! bg:{<filter>:<gen>:<seg>}:bits     the segment's payload (bit p of the string = Redis bit p)
//! bg:{<filter>:<gen>:<seg>}:ver      integer, bumped by every add that changed a bit
//! ```
//!
//! The trap: `GETRANGE`/`GETBIT` on a missing key read as zeros, i.e. "certainly not seen".
//! Every read here checks the key exists at its full size, and every add runs in a script that
//! refuses to create a segment, so a flushed or evicted filter reads as *unavailable*.

use super::{FilterMeta, FilterState, FilterStore, FilterUnavailable, SegmentBits};
use crate::build_progress::BuildProgress;
use bloomgate_filter::block::{bytes_contain, probe_mask, probe_positions, BLOCK_BITS, BLOCK_BYTES};
use bloomgate_filter::KeyHash;
use futures::future::BoxFuture;
use futures::FutureExt;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{AsyncCommands, Script};
use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;
use tracing::{instrument, warn};

/// Sets the given bits only if the segment and its version exist; bumps the version if any bit
/// changed. Returns the version, or -1 when the segment is missing (never creates it).
const ADD_SCRIPT: &str = r"
if redis.call('EXISTS', KEYS[1]) == 0 or redis.call('EXISTS', KEYS[2]) == 0 then return -1 end
local changed = 0
for i = 1, #ARGV do
  if redis.call('SETBIT', KEYS[1], ARGV[i], 1) == 0 then changed = 1 end
end
if changed == 1 then return redis.call('INCR', KEYS[2]) end
return tonumber(redis.call('GET', KEYS[2]))
";

/// Reads a segment's version and bits in one atomic step, so the bits are never older than
/// the version they are labelled with.
const READ_SEGMENT_SCRIPT: &str = r"
return {redis.call('GET', KEYS[2]), redis.call('GET', KEYS[1])}
";

/// ORs an uploaded payload into a segment (keeping bits set by concurrent adds) and bumps its
/// version, only if the segment exists. Returns the new version or -1.
const MERGE_SCRIPT: &str = r"
if redis.call('EXISTS', KEYS[1]) == 0 or redis.call('EXISTS', KEYS[2]) == 0 then return -1 end
redis.call('SET', KEYS[3], ARGV[1])
redis.call('BITOP', 'OR', KEYS[1], KEYS[1], KEYS[3])
redis.call('DEL', KEYS[3])
return redis.call('INCR', KEYS[2])
";

/// Takes or extends the lease for ARGV[1] with expiry ARGV[2] ms. Returns 1 if held.
const LEASE_SCRIPT: &str = r"
local holder = redis.call('GET', KEYS[1])
if holder == false or holder == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
return 0
";

/// Releases the lease only if ARGV[1] holds it.
const RELEASE_SCRIPT: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
return 0
";

/// Creates a zeroed segment and its version unless they exist.
const CREATE_SEGMENT_SCRIPT: &str = r"
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('SETRANGE', KEYS[1], tonumber(ARGV[1]) - 1, '\0')
  redis.call('SET', KEYS[2], 0)
end
return redis.call('STRLEN', KEYS[1])
";

/// Connection settings.
#[derive(Clone, Debug)]
pub struct RedisSettings {
    /// `redis://host:port/db`.
    pub url: String,
    /// Per-call timeout of lookups: slower than this counts as unavailable and falls through.
    pub timeout: Duration,
    /// Per-call timeout of adds and other heavy calls: a write may wait longer than a lookup
    /// (a timed-out add fails the write, which the caller retries).
    pub write_timeout: Duration,
}

/// The filter in Redis.
#[derive(Clone)]
pub struct RedisFilterStore {
    conn: ConnectionManager,
    timeout: Duration,
    write_timeout: Duration,
    add: Script,
    read_segment: Script,
    create_segment: Script,
    merge: Script,
    lease: Script,
    release: Script,
}

fn meta_key(filter: &str) -> String {
    format!("bg:{{{filter}}}:meta")
}

fn lease_key(filter: &str) -> String {
    format!("bg:{{{filter}}}:lease")
}

fn progress_key(filter: &str) -> String {
    format!("bg:{{{filter}}}:progress")
}

/// A rebuild's published progress outlives its last update by this much, then vanishes.
const PROGRESS_TTL_MS: u64 = 30_000;

fn deletes_key(filter: &str, generation: u64) -> String {
    format!("bg:{{{filter}}}:deletes:{generation}")
}

fn upload_key(filter: &str, generation: u64, index: u32) -> String {
    format!("bg:{{{filter}:{generation}:{index}}}:upload")
}

fn segment_keys(filter: &str, generation: u64, index: u32) -> (String, String) {
    let tag = format!("bg:{{{filter}:{generation}:{index}}}");
    (format!("{tag}:bits"), format!("{tag}:ver"))
}

impl RedisFilterStore {
    /// Connects lazily: the origin starts (and answers from the key store) even while Redis is
    /// down, and reconnects in the background.
    pub fn connect(settings: &RedisSettings) -> Result<RedisFilterStore, redis::RedisError> {
        let client = redis::Client::open(settings.url.as_str())?;
        let config = ConnectionManagerConfig::new()
            .set_response_timeout(Some(settings.timeout))
            .set_connection_timeout(Some(settings.timeout.max(Duration::from_millis(250))))
            .set_number_of_retries(1)
            .set_max_delay(Duration::from_millis(500));
        let conn = ConnectionManager::new_lazy_with_config(client, config)?;
        Ok(RedisFilterStore {
            conn,
            timeout: settings.timeout,
            write_timeout: settings.write_timeout,
            add: Script::new(ADD_SCRIPT),
            read_segment: Script::new(READ_SEGMENT_SCRIPT),
            create_segment: Script::new(CREATE_SEGMENT_SCRIPT),
            merge: Script::new(MERGE_SCRIPT),
            lease: Script::new(LEASE_SCRIPT),
            release: Script::new(RELEASE_SCRIPT),
        })
    }

    /// Warns loudly when Redis may evict our keys. Eviction is survivable (missing keys fall
    /// through) but silently turns the filter off until a rebuild.
    pub async fn check_eviction_policy(&self) {
        let policy: Result<Vec<String>, _> = self
            .call(redis::cmd("CONFIG").arg("GET").arg("maxmemory-policy").query_async(&mut self.conn.clone()))
            .await;
        match policy.as_deref() {
            Ok([_, policy]) if policy.starts_with("allkeys-") => warn!(
                policy = %policy,
                "Redis maxmemory-policy can evict filter segments; lookups will fall through to Cassandra until a rebuild. Set maxmemory-policy noeviction."
            ),
            Ok(_) => {}
            Err(err) => warn!(cause = %err, "could not read Redis maxmemory-policy"),
        }
    }

    /// Runs a lookup-path Redis call under the lookup timeout.
    async fn call<T>(&self, fut: impl Future<Output = redis::RedisResult<T>>) -> Result<T, FilterUnavailable> {
        Self::within(self.timeout, fut).await
    }

    /// Runs a write-path or heavy Redis call under the write timeout.
    async fn call_slow<T>(&self, fut: impl Future<Output = redis::RedisResult<T>>) -> Result<T, FilterUnavailable> {
        Self::within(self.write_timeout, fut).await
    }

    /// Reads a filter's state from its meta key under `limit` (lookups and writes wait differently long).
    async fn read_state(&self, key: String, limit: Duration) -> Result<FilterState, FilterUnavailable> {
        let mut conn = self.conn.clone();
        let json: Option<String> = Self::within(limit, conn.get(key)).await?;
        let json = json.ok_or(FilterUnavailable::MetaMissing)?;
        serde_json::from_str(&json).map_err(|e| FilterUnavailable::Error(format!("bad filter metadata: {e}")))
    }

    /// Maps a timeout or failure to "unavailable".
    async fn within<T>(
        limit: Duration,
        fut: impl Future<Output = redis::RedisResult<T>>,
    ) -> Result<T, FilterUnavailable> {
        match tokio::time::timeout(limit, fut).await {
            Err(_) => Err(FilterUnavailable::Timeout),
            Ok(Err(err)) if err.is_timeout() => Err(FilterUnavailable::Timeout),
            Ok(Err(err)) => Err(FilterUnavailable::Error(err.to_string())),
            Ok(Ok(value)) => Ok(value),
        }
    }
}

impl FilterStore for RedisFilterStore {
    #[instrument(skip(self, meta))]
    fn create_generation(&self, filter: &str, meta: FilterMeta) -> BoxFuture<'_, Result<(), FilterUnavailable>> {
        let filter = filter.to_owned();
        async move {
            let size = meta.params.segment_bytes();
            for index in 0..meta.params.segment_count {
                let (bits, ver) = segment_keys(&filter, meta.generation, index);
                let mut conn = self.conn.clone();
                let len: u64 =
                    self.call_slow(self.create_segment.key(&bits).key(&ver).arg(size).invoke_async(&mut conn)).await?;
                if len != size {
                    return Err(FilterUnavailable::Error(format!(
                        "segment {bits} is {len} bytes, expected {size}: delete the filter's keys in Redis and recreate"
                    )));
                }
            }
            Ok(())
        }
        .boxed()
    }

    fn state(&self, filter: &str) -> BoxFuture<'_, Result<FilterState, FilterUnavailable>> {
        self.read_state(meta_key(filter), self.timeout).boxed()
    }

    fn state_for_write(&self, filter: &str) -> BoxFuture<'_, Result<FilterState, FilterUnavailable>> {
        self.read_state(meta_key(filter), self.write_timeout).boxed()
    }

    fn set_state(&self, filter: &str, state: FilterState) -> BoxFuture<'_, Result<(), FilterUnavailable>> {
        let key = meta_key(filter);
        async move {
            let json = serde_json::to_string(&state).map_err(|e| FilterUnavailable::Error(e.to_string()))?;
            let mut conn = self.conn.clone();
            self.call_slow(conn.set::<_, _, ()>(key, json)).await
        }
        .boxed()
    }

    fn merge_segment(
        &self,
        filter: &str,
        meta: FilterMeta,
        index: u32,
        payload: Vec<u8>,
    ) -> BoxFuture<'_, Result<(), FilterUnavailable>> {
        let (bits, ver) = segment_keys(filter, meta.generation, index);
        let upload = upload_key(filter, meta.generation, index);
        async move {
            let mut conn = self.conn.clone();
            let version: i64 = self
                .call_slow(self.merge.key(&bits).key(&ver).key(&upload).arg(payload).invoke_async(&mut conn))
                .await?;
            if version < 0 {
                return Err(FilterUnavailable::SegmentMissing(index));
            }
            Ok(())
        }
        .boxed()
    }

    fn count_deletes(&self, filter: &str, meta: FilterMeta, n: u64) -> BoxFuture<'_, Result<(), FilterUnavailable>> {
        let key = deletes_key(filter, meta.generation);
        async move {
            let mut conn = self.conn.clone();
            self.call_slow(conn.incr::<_, _, ()>(key, n)).await
        }
        .boxed()
    }

    fn deletes(&self, filter: &str, meta: FilterMeta) -> BoxFuture<'_, Result<u64, FilterUnavailable>> {
        let key = deletes_key(filter, meta.generation);
        async move {
            let mut conn = self.conn.clone();
            Ok(self.call_slow(conn.get::<_, Option<u64>>(key)).await?.unwrap_or(0))
        }
        .boxed()
    }

    fn set_progress(&self, filter: &str, progress: BuildProgress) -> BoxFuture<'_, Result<(), FilterUnavailable>> {
        let key = progress_key(filter);
        async move {
            let json = serde_json::to_string(&progress).map_err(|e| FilterUnavailable::Error(e.to_string()))?;
            let mut conn = self.conn.clone();
            self.call_slow(conn.pset_ex::<_, _, ()>(key, json, PROGRESS_TTL_MS)).await
        }
        .boxed()
    }

    fn progress(&self, filter: &str) -> BoxFuture<'_, Result<Option<BuildProgress>, FilterUnavailable>> {
        let key = progress_key(filter);
        async move {
            let mut conn = self.conn.clone();
            let json: Option<String> = self.call_slow(conn.get(key)).await?;
            // Unreadable progress is no progress: it is advisory.
            Ok(json.and_then(|j| serde_json::from_str(&j).ok()))
        }
        .boxed()
    }

    fn delete_generation(&self, filter: &str, meta: FilterMeta) -> BoxFuture<'_, Result<(), FilterUnavailable>> {
        let filter = filter.to_owned();
        async move {
            let mut conn = self.conn.clone();
            self.call_slow(conn.del::<_, ()>(deletes_key(&filter, meta.generation))).await?;
            for index in 0..meta.params.segment_count {
                let (bits, ver) = segment_keys(&filter, meta.generation, index);
                let mut conn = self.conn.clone();
                self.call_slow(conn.del::<_, ()>(&[bits, ver])).await?;
            }
            Ok(())
        }
        .boxed()
    }

    fn lease(&self, filter: &str, owner: &str, ttl: Duration) -> BoxFuture<'_, Result<bool, FilterUnavailable>> {
        let (key, owner) = (lease_key(filter), owner.to_owned());
        async move {
            let mut conn = self.conn.clone();
            let held: i64 = self
                .call_slow(self.lease.key(&key).arg(&owner).arg(ttl.as_millis() as u64).invoke_async(&mut conn))
                .await?;
            Ok(held == 1)
        }
        .boxed()
    }

    fn release_lease(&self, filter: &str, owner: &str) -> BoxFuture<'_, Result<(), FilterUnavailable>> {
        let (key, owner) = (lease_key(filter), owner.to_owned());
        async move {
            let mut conn = self.conn.clone();
            self.call_slow(self.release.key(&key).arg(&owner).invoke_async::<i64>(&mut conn)).await.map(|_| ())
        }
        .boxed()
    }

    fn may_contain(
        &self,
        filter: &str,
        meta: FilterMeta,
        hash: KeyHash,
    ) -> BoxFuture<'_, Result<bool, FilterUnavailable>> {
        let at = meta.params.locate(&hash);
        let (bits, _) = segment_keys(filter, meta.generation, at.segment);
        async move {
            let start = at.byte_offset_in_segment() as isize;
            let mut conn = self.conn.clone();
            let block: Vec<u8> = self.call(conn.getrange(bits, start, start + BLOCK_BYTES as isize - 1)).await?;
            // A missing key reads as "" (not zeros) through GETRANGE: that, or a short string,
            // is a missing segment, never "not seen".
            let block: [u8; BLOCK_BYTES] =
                block.try_into().map_err(|_| FilterUnavailable::SegmentMissing(at.segment))?;
            Ok(bytes_contain(&block, &probe_mask(hash.probe_bits, meta.params.k)))
        }
        .boxed()
    }

    fn add(
        &self,
        filter: &str,
        meta: FilterMeta,
        hashes: Vec<KeyHash>,
    ) -> BoxFuture<'_, Result<(), FilterUnavailable>> {
        let filter = filter.to_owned();
        async move {
            // One script call per touched segment, all in flight at once (the connection
            // manager pipelines them).
            let mut by_segment: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
            for hash in &hashes {
                let at = meta.params.locate(hash);
                let base = u64::from(at.block_in_segment) * u64::from(BLOCK_BITS);
                let (positions, n) = probe_positions(hash.probe_bits, meta.params.k);
                by_segment.entry(at.segment).or_default().extend(positions[..n].iter().map(|p| base + u64::from(*p)));
            }
            let calls = by_segment.into_iter().map(|(segment, offsets)| {
                let (bits, ver) = segment_keys(&filter, meta.generation, segment);
                async move {
                    let mut invocation = self.add.key(&bits);
                    invocation.key(&ver);
                    for offset in &offsets {
                        invocation.arg(*offset);
                    }
                    let mut conn = self.conn.clone();
                    let version: i64 = self.call_slow(invocation.invoke_async(&mut conn)).await?;
                    if version < 0 {
                        return Err(FilterUnavailable::SegmentMissing(segment));
                    }
                    Ok(())
                }
            });
            futures::future::try_join_all(calls).await.map(|_| ())
        }
        .boxed()
    }

    fn segment(
        &self,
        filter: &str,
        generation: u64,
        index: u32,
    ) -> BoxFuture<'_, Result<SegmentBits, FilterUnavailable>> {
        let (bits, ver) = segment_keys(filter, generation, index);
        async move {
            let mut conn = self.conn.clone();
            let (version, payload): (Option<u64>, Option<Vec<u8>>) =
                self.call(self.read_segment.key(&bits).key(&ver).invoke_async(&mut conn)).await?;
            match (version, payload) {
                (Some(version), Some(payload)) => Ok(SegmentBits { version, payload }),
                _ => Err(FilterUnavailable::SegmentMissing(index)),
            }
        }
        .boxed()
    }

    fn segment_versions(&self, filter: &str, meta: FilterMeta) -> BoxFuture<'_, Result<Vec<u64>, FilterUnavailable>> {
        let filter = filter.to_owned();
        async move {
            let mut pipe = redis::pipe();
            for index in 0..meta.params.segment_count {
                pipe.get(segment_keys(&filter, meta.generation, index).1);
            }
            let mut conn = self.conn.clone();
            let versions: Vec<Option<u64>> = self.call_slow(pipe.query_async(&mut conn)).await?;
            versions
                .into_iter()
                .enumerate()
                .map(|(i, v)| v.ok_or(FilterUnavailable::SegmentMissing(i as u32)))
                .collect()
        }
        .boxed()
    }

    fn count_ones(&self, filter: &str, meta: FilterMeta) -> BoxFuture<'_, Result<u64, FilterUnavailable>> {
        let filter = filter.to_owned();
        async move {
            let mut pipe = redis::pipe();
            for index in 0..meta.params.segment_count {
                pipe.cmd("BITCOUNT").arg(segment_keys(&filter, meta.generation, index).0);
            }
            let mut conn = self.conn.clone();
            let counts: Vec<u64> = self.call_slow(pipe.query_async(&mut conn)).await?;
            Ok(counts.iter().sum())
        }
        .boxed()
    }

    fn memory_bytes(&self, _filter: &str, meta: FilterMeta) -> BoxFuture<'_, Result<Option<u64>, FilterUnavailable>> {
        async move { Ok(Some(meta.params.total_bytes())) }.boxed()
    }

    fn ping(&self) -> BoxFuture<'_, Result<(), FilterUnavailable>> {
        async move {
            let mut conn = self.conn.clone();
            self.call(redis::cmd("PING").query_async::<String>(&mut conn)).await.map(|_| ())
        }
        .boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_segments_bits_and_version_share_a_cluster_slot_and_segments_differ() {
        let (bits, ver) = segment_keys("hashes", 3, 17);
        assert_eq!(bits, "bg:{hashes:3:17}:bits");
        assert_eq!(ver, "bg:{hashes:3:17}:ver");
        assert_ne!(segment_keys("hashes", 3, 18).0, bits);
        assert_eq!(meta_key("hashes"), "bg:{hashes}:meta");
    }
}
