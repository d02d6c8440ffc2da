//! The shared filter in Redis: plain bitmaps, one string per segment, plus a version counter
//! per segment and one metadata key per filter naming the active generation.
//!
//! Keys (hash tags keep a segment's bits and version in one Cluster slot, while different
//! segments spread over slots):
//!
//! ```text
//! bg:{<filter>}:meta                 JSON FilterState: active, building, previous generations,
//!                                    each with the Redis incarnation (run_id) holding its bits
//! bg:{<filter>}:lease                owner of the rebuild lease (with expiry)
//! bg:{<filter>}:deletes:<gen>        keys deleted whose bits generation <gen> still holds
//! bg:{<filter>}:progress             JSON BuildProgress of a running rebuild (expires)
//! bg:{<filter>}:jnl:<gen>            stream: the generation's insert journal, one entry per add
//!                                    (field `h`: the added keys' 16-byte hashes; `init` marks
//!                                    the entry written when the generation was created)
//! bg:{<filter>:<gen>:<seg>}:bits     the segment's payload (bit p of the string = Redis bit p)
//! bg:{<filter>:<gen>:<seg>}:ver      integer, bumped by every add that changed a bit; the
//!                                    string `retired` (expiring) once the generation is retired,
//!                                    `lost` once an add found the segment half gone
//! ```
//!
//! The trap: `GETRANGE`/`GETBIT` on a missing key read as zeros, i.e. "certainly not seen".
//! Every read here checks the key exists at its full size, and every add runs in a script that
//! refuses to create a segment, so a flushed or evicted filter reads as *unavailable*.
//!
//! Every call goes over a [`RedisLink`], which knows the incarnation of the process it reached:
//! a call about a generation of another incarnation is refused before it is sent. On a Redis
//! Cluster ([`ClusterLink`]) every key above lives in its hash tag's slot: a filter's metadata
//! and journal in one, each segment in its own. Every script then checks, inside Redis, that
//! the process running it is one of the masters the generation was created on, and an add is
//! one script per touched segment followed by the journal append (see `add`).

pub mod cluster;
pub mod conn;
pub mod link;

use super::{
    CopySource, EdgeFeedStore, FilterMeta, FilterState, FilterStore, FilterUnavailable, JournalRead, JournalRetention,
    JournalSize, LifecycleStore, LookupStore, SegmentBits, StateStore, StatsStore, WriteStore,
};
use crate::build_progress::BuildProgress;
use async_trait::async_trait;
use bloomgate_filter::block::{bytes_contain, probe_mask, probe_positions, BLOCK_BITS, BLOCK_BYTES};
use bloomgate_filter::journal::{decode_hashes, encode_hash, HASH_BYTES};
use bloomgate_filter::{JournalPosition, KeyHash};
use cluster::{ClusterLink, GUARD_PRELUDE, REFUSED_CODE};
use conn::RedisConn;
use link::{CallOutcome, RedisLink};
use redis::{AsyncCommands, FromRedisValue, Script, ScriptInvocation};
use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;
use tracing::{instrument, warn};

/// One add, atomically: sets the bits in each touched segment, then appends the hashes to the
/// generation's insert journal (when it has one), so an entry is never seen without its bits
/// and no bits of an acknowledged add are ever missing from the journal.
///
/// KEYS: `bits`, `ver` of each touched segment, then the journal (if ARGV[1] is 1). ARGV: [1]
/// journal 0/1, [2] the journal's max entries, [3] its oldest id kept, [4] the entry (hashes),
/// then per segment a count n and n bit offsets.
///
/// A segment whose version is `retired` or `lost` is skipped: the add changes nothing there
/// and is harmless. One found half gone (bits or version missing: evicted, deleted) is marked
/// lost first — bits deleted, version `lost` — so no reader, origin or edge, can ever use it
/// again; the recovery check rebuilds the generation. It is never re-created as zeros. A
/// changed segment's version is bumped. Returns 1; 2 when the journal was retired (the
/// generation is unreadable: a harmless no-op, as the bits were); 0 when a journal that should
/// exist is missing (the add must not be acknowledged). The journal is never re-created
/// (NOMKSTREAM semantics), so its positions never restart.
const ADD_SCRIPT: &str = r"
local journal = ARGV[1] == '1'
local segments = #KEYS
if journal then segments = segments - 1 end
local at = 5
for s = 1, segments, 2 do
  local bits, ver = KEYS[s], KEYS[s + 1]
  local n = tonumber(ARGV[at])
  local v = redis.call('GET', ver)
  if v == 'retired' or v == 'lost' then
  elseif v == false or redis.call('EXISTS', bits) == 0 then
    redis.call('DEL', bits)
    redis.call('SET', ver, 'lost')
  else
    local changed = 0
    for i = at + 1, at + n do
      if redis.call('SETBIT', bits, ARGV[i], 1) == 0 then changed = 1 end
    end
    if changed == 1 then redis.call('INCR', ver) end
  end
  at = at + n + 1
end
if not journal then return 1 end
local jnl = KEYS[#KEYS]
local kind = redis.call('TYPE', jnl)['ok']
if kind == 'string' and redis.call('GET', jnl) == 'retired' then return 2 end
if kind ~= 'stream' then return 0 end
redis.call('XADD', jnl, 'MAXLEN', '~', ARGV[2], '*', 'h', ARGV[4])
redis.call('XTRIM', jnl, 'MINID', '~', ARGV[3])
return 1
";

/// Reads a segment's version and bits in one atomic step, so the bits are never older than
/// the version they are labelled with.
const READ_SEGMENT_SCRIPT: &str = r"
return {redis.call('GET', KEYS[2]), redis.call('GET', KEYS[1])}
";

/// ORs an uploaded payload into a segment (keeping bits set by concurrent adds) and bumps its
/// version, only if the segment exists and is not retired. Returns the new version or -1.
const MERGE_SCRIPT: &str = r"
local ver = redis.call('GET', KEYS[2])
if ver == false or ver == 'retired' or ver == 'lost' or redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
redis.call('SET', KEYS[3], ARGV[1])
redis.call('BITOP', 'OR', KEYS[1], KEYS[1], KEYS[3])
redis.call('DEL', KEYS[3])
return redis.call('INCR', KEYS[2])
";

/// Makes a segment unreadable while adds to it keep succeeding as no-ops (see ADD_SCRIPT);
/// the marker expires after ARGV[1] ms, long after any write that could still name it.
const RETIRE_SCRIPT: &str = r"
redis.call('DEL', KEYS[1])
redis.call('SET', KEYS[2], 'retired', 'PX', ARGV[1])
return 1
";

/// Replaces a retired generation's journal with a `retired` marker, so appends from writes
/// that still name the generation succeed as no-ops (see ADD_SCRIPT) instead of
/// failing a write whose bits went everywhere they had to.
const RETIRE_JOURNAL_SCRIPT: &str = r"
redis.call('SET', KEYS[1], 'retired', 'PX', ARGV[1])
return 1
";

/// Replaces the filter state if its revision is still ARGV[1] (-1: only if there is none).
/// Returns 1 if replaced, 0 if someone changed it first.
const REPLACE_STATE_SCRIPT: &str = r"
local current = redis.call('GET', KEYS[1])
local expected = tonumber(ARGV[1])
if current == false then
  if expected ~= -1 then return 0 end
else
  if expected == -1 then return 0 end
  local revision = cjson.decode(current)['revision']
  if type(revision) ~= 'number' then revision = 0 end
  if revision ~= expected then return 0 end
end
redis.call('SET', KEYS[1], ARGV[2])
return 1
";

/// Deletes a key unless it is a retirement marker (those expire on their own).
const DELETE_UNLESS_RETIRED_SCRIPT: &str = r"
if redis.call('TYPE', KEYS[1])['ok'] == 'string' and redis.call('GET', KEYS[1]) == 'retired' then return 0 end
return redis.call('DEL', KEYS[1])
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

/// Reads the journal after id ARGV[1] (at most ARGV[2] entries) with what decides whether the
/// caller's position is still covered: {1, max-deleted-entry-id, entries-added,
/// last-generated-id, entries}, or {0} if the journal is missing. With ARGV[3] = 1, for a
/// caller whose position was read from this very journal (a local copy), {2} when the newest
/// entry is the caller's: nothing to read, without the costlier XINFO (the read barrier's usual
/// answer, made once per round trip, on a cluster; a single Redis asks first without a script).
const READ_JOURNAL_SCRIPT: &str = r"
if redis.call('TYPE', KEYS[1])['ok'] ~= 'stream' then return {0} end
if ARGV[3] == '1' then
  local newest = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)
  if newest[1] ~= nil and newest[1][1] == ARGV[1] then return {2} end
end
local info = redis.call('XINFO', 'STREAM', KEYS[1])
local f = {}
for i = 1, #info, 2 do f[info[i]] = info[i + 1] end
local entries = redis.call('XRANGE', KEYS[1], '(' .. ARGV[1], '+', 'COUNT', ARGV[2])
return {1, f['max-deleted-entry-id'], f['entries-added'], f['last-generated-id'], entries}
";

/// The journal's head: {1, entries-added, last-generated-id, length}, or {0} if missing.
const JOURNAL_HEAD_SCRIPT: &str = r"
if redis.call('TYPE', KEYS[1])['ok'] ~= 'stream' then return {0} end
local info = redis.call('XINFO', 'STREAM', KEYS[1])
local f = {}
for i = 1, #info, 2 do f[info[i]] = info[i + 1] end
return {1, f['entries-added'], f['last-generated-id'], f['length']}
";

/// Starts a generation's journal with one entry, so it exists (appends never create it).
const INIT_JOURNAL_SCRIPT: &str = r"
if redis.call('XLEN', KEYS[1]) == 0 then redis.call('XADD', KEYS[1], '*', 'init', 1) end
return 1
";

/// A segment's size and version (cluster mode: a pipeline cannot span slots).
const SEGMENT_SIZE_SCRIPT: &str = r"
return {redis.call('STRLEN', KEYS[1]), redis.call('GET', KEYS[2])}
";

/// A segment's version (cluster mode: a plain GET could not refuse a promoted replica).
const READ_VERSION_SCRIPT: &str = r"
return redis.call('GET', KEYS[1])
";

/// One block of a segment's bits (cluster mode's lookup; see READ_VERSION_SCRIPT).
const READ_BLOCK_SCRIPT: &str = r"
return redis.call('GETRANGE', KEYS[1], ARGV[1], ARGV[2])
";

/// How long a retired segment's marker lives: far longer than any write that read a state
/// naming the generation can take.
const RETIRED_MARKER_MS: u64 = 600_000;

/// Connection settings.
#[derive(Clone, Debug)]
pub struct RedisSettings {
    /// How long insert journals keep their entries.
    pub journal: JournalRetention,
    /// `redis://host:port/db` of a single Redis (ignored when `cluster_nodes` is set).
    pub url: String,
    /// Any of a Redis Cluster's nodes (`redis://host:port`); empty = a single Redis at `url`.
    pub cluster_nodes: Vec<String>,
    /// In a cluster: replicas that must have every add (`WAIT`) before it is acknowledged,
    /// capped at the fewest replicas a master has; 0 = do not wait.
    pub min_replicas_acked: u32,
    /// Per-call timeout of lookups: slower than this counts as unavailable and falls through.
    pub timeout: Duration,
    /// Per-call timeout of adds and other heavy calls: a write may wait longer than a lookup
    /// (a timed-out add fails the write, which the caller retries).
    pub write_timeout: Duration,
}

/// The filter in Redis.
#[derive(Clone)]
pub struct RedisFilterStore {
    backend: Backend,
    min_replicas_acked: u32,
    init_journal: Script,
    read_version: Script,
    read_block: Script,
    segment_size: Script,
    journal: JournalRetention,
    retire_journal: Script,
    read_journal: Script,
    journal_head: Script,
    timeout: Duration,
    write_timeout: Duration,
    add: Script,
    read_segment: Script,
    create_segment: Script,
    merge: Script,
    retire: Script,
    replace_state: Script,
    delete_unless_retired: Script,
    lease: Script,
    release: Script,
}

/// How the store reaches Redis.
#[derive(Clone)]
enum Backend {
    /// One Redis; the connection knows the incarnation it reached.
    Single(RedisLink),
    /// A Redis Cluster; scripts check the incarnation inside Redis.
    Cluster(ClusterLink),
}

/// What carried a call, to be told how it went (a broken connection is replaced).
enum Carrier<'a> {
    /// The single Redis's link and the connection it lent.
    Single(&'a RedisLink, std::sync::Arc<link::Link>),
    /// The cluster's link.
    Cluster(&'a ClusterLink),
}

/// A script as sent in this mode: in a cluster, behind the incarnation guard.
fn script(cluster: bool, body: &str) -> Script {
    match cluster {
        true => Script::new(&format!("{GUARD_PRELUDE}{body}")),
        false => Script::new(body),
    }
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

fn journal_key(filter: &str, generation: u64) -> String {
    format!("bg:{{{filter}}}:jnl:{generation}")
}

/// A stream id `ms-seq` as a journal position's id parts.
fn parse_stream_id(id: &str) -> Option<(u64, u64)> {
    let (ms, seq) = id.split_once('-')?;
    Some((ms.parse().ok()?, seq.parse().ok()?))
}

fn upload_key(filter: &str, generation: u64, index: u32) -> String {
    format!("bg:{{{filter}:{generation}:{index}}}:upload")
}

fn segment_keys(filter: &str, generation: u64, index: u32) -> (String, String) {
    let tag = format!("bg:{{{filter}:{generation}:{index}}}");
    (format!("{tag}:bits"), format!("{tag}:ver"))
}

/// The generation a key of `filter` belongs to: segment keys `bg:{f:<gen>:<i>}:…` and delete
/// counts `bg:{f}:deletes:<gen>`; None for the filter's other keys.
fn generation_of_key(filter: &str, key: &str) -> Option<u64> {
    for kind in ["deletes", "jnl"] {
        if let Some(rest) = key.strip_prefix(&format!("bg:{{{filter}}}:{kind}:")) {
            return rest.parse().ok();
        }
    }
    let rest = key.strip_prefix(&format!("bg:{{{filter}:"))?;
    rest.split(':').next()?.parse().ok()
}

/// Indices of at most `max` segments of `count`, spread evenly from the first.
fn sample_indices(count: u32, max: u32) -> impl Iterator<Item = u32> {
    let step = count.div_ceil(max.max(1)).max(1);
    (0..count).step_by(step as usize)
}

/// A version as stored: a number, or anything else (missing, `retired`) = no usable segment.
fn parse_version(value: Option<String>) -> Option<u64> {
    value?.parse().ok()
}

impl RedisFilterStore {
    /// A single Redis is connected lazily: the origin starts (and answers from the database)
    /// even while Redis is down, and reconnects in the background. A cluster is connected
    /// now: its client needs one node to learn the others.
    pub async fn connect(settings: &RedisSettings) -> Result<RedisFilterStore, FilterUnavailable> {
        let slowest = settings.write_timeout.max(settings.timeout);
        let connect_timeout = settings.write_timeout.max(Duration::from_millis(250));
        let backend = match settings.cluster_nodes.as_slice() {
            [] => {
                let client = redis::Client::open(settings.url.as_str())
                    .map_err(|e| FilterUnavailable::Error(format!("redis_url {:?}: {e}", settings.url)))?;
                Backend::Single(RedisLink::new(client, slowest, connect_timeout))
            }
            nodes => Backend::Cluster(ClusterLink::connect(nodes, slowest, connect_timeout).await?),
        };
        let cluster = matches!(backend, Backend::Cluster(_));
        Ok(RedisFilterStore {
            backend,
            min_replicas_acked: settings.min_replicas_acked,
            init_journal: script(cluster, INIT_JOURNAL_SCRIPT),
            read_version: script(cluster, READ_VERSION_SCRIPT),
            read_block: script(cluster, READ_BLOCK_SCRIPT),
            segment_size: script(cluster, SEGMENT_SIZE_SCRIPT),
            journal: settings.journal,
            retire_journal: script(cluster, RETIRE_JOURNAL_SCRIPT),
            read_journal: script(cluster, READ_JOURNAL_SCRIPT),
            journal_head: script(cluster, JOURNAL_HEAD_SCRIPT),
            timeout: settings.timeout,
            write_timeout: settings.write_timeout,
            add: script(cluster, ADD_SCRIPT),
            read_segment: script(cluster, READ_SEGMENT_SCRIPT),
            create_segment: script(cluster, CREATE_SEGMENT_SCRIPT),
            merge: script(cluster, MERGE_SCRIPT),
            retire: script(cluster, RETIRE_SCRIPT),
            replace_state: script(cluster, REPLACE_STATE_SCRIPT),
            delete_unless_retired: script(cluster, DELETE_UNLESS_RETIRED_SCRIPT),
            lease: script(cluster, LEASE_SCRIPT),
            release: script(cluster, RELEASE_SCRIPT),
        })
    }

    /// Warns loudly when Redis may evict our keys. Eviction is survivable (missing keys fall
    /// through) but silently turns the filter off until a rebuild.
    pub async fn check_eviction_policy(&self) {
        let policy: Result<Vec<String>, _> = self
            .call(self.write_timeout, None, |mut c| async move {
                redis::cmd("CONFIG").arg("GET").arg("maxmemory-policy").query_async(&mut c).await
            })
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

    /// Runs one call under `limit`, over the current link, and reports to the link how it
    /// went. With `expect`, the call is refused (never sent) unless the link reaches the Redis
    /// incarnation `expect` names.
    async fn call<T, F, Fut>(&self, limit: Duration, expect: Option<u64>, call: F) -> Result<T, FilterUnavailable>
    where
        F: FnOnce(RedisConn) -> Fut,
        Fut: Future<Output = redis::RedisResult<T>>,
    {
        self.call_at(limit, expect, call).await.map(|(value, _)| value)
    }

    /// [`call`](Self::call), also returning the incarnation the call reached. On a cluster the
    /// expectation is checked against the masters last read here, and again inside Redis by
    /// every script (a promoted replica refuses: see `cluster`).
    async fn call_at<T, F, Fut>(
        &self,
        limit: Duration,
        expect: Option<u64>,
        call: F,
    ) -> Result<(T, u64), FilterUnavailable>
    where
        F: FnOnce(RedisConn) -> Fut,
        Fut: Future<Output = redis::RedisResult<T>>,
    {
        let (conn, incarnation, carrier) = match &self.backend {
            Backend::Single(link) => {
                let reached =
                    tokio::time::timeout(limit, link.get()).await.map_err(|_| FilterUnavailable::Timeout)??;
                (RedisConn::Single(reached.conn.clone()), reached.incarnation, Carrier::Single(link, reached))
            }
            Backend::Cluster(cluster) => {
                (RedisConn::Cluster(cluster.conn()), cluster.topology()?.incarnation, Carrier::Cluster(cluster))
            }
        };
        if expect.is_some_and(|expected| expected != incarnation) {
            return Err(FilterUnavailable::Incarnation);
        }
        let outcome = tokio::time::timeout(limit, call(conn)).await;
        let how = match &outcome {
            Err(_) => CallOutcome::TimedOut,
            Ok(Err(err)) => CallOutcome::of_error(err),
            Ok(Ok(_)) => CallOutcome::Answered,
        };
        match &carrier {
            Carrier::Single(link, reached) => link.report(reached, how),
            Carrier::Cluster(cluster) => cluster.report(how),
        }
        match outcome {
            Err(_) => Err(FilterUnavailable::Timeout),
            Ok(Err(err)) if err.code() == Some(REFUSED_CODE) => {
                if let Carrier::Cluster(cluster) = carrier {
                    cluster.refresh_soon();
                }
                Err(FilterUnavailable::Incarnation)
            }
            Ok(Err(_)) if how == CallOutcome::TimedOut => Err(FilterUnavailable::Timeout),
            Ok(Err(err)) => Err(FilterUnavailable::Error(err.to_string())),
            Ok(Ok(value)) => Ok((value, incarnation)),
        }
    }

    /// Runs a script as [`call`](Self::call) does. In a cluster, its guard gets the `run_id`s
    /// of the masters `expect` names (none without `expect`), so the script itself refuses to
    /// run on any other process.
    async fn run<T: FromRedisValue>(
        &self,
        limit: Duration,
        expect: Option<u64>,
        mut invocation: ScriptInvocation<'_>,
    ) -> Result<T, FilterUnavailable> {
        if let Backend::Cluster(cluster) = &self.backend {
            match expect {
                Some(_) => {
                    let topology = cluster.topology()?;
                    for run_id in &topology.run_ids {
                        invocation.arg(run_id);
                    }
                    invocation.arg(topology.run_ids.len());
                }
                None => {
                    invocation.arg(0);
                }
            }
        }
        let invocation = &invocation;
        self.call(limit, expect, |mut c| async move { invocation.invoke_async(&mut c).await }).await
    }

    /// Reads a filter's state from its meta key under `limit` (lookups and writes wait differently long).
    async fn read_state(&self, filter: &str, limit: Duration) -> Result<FilterState, FilterUnavailable> {
        let key = meta_key(filter);
        let (json, incarnation): (Option<String>, u64) =
            self.call_at(limit, None, |mut c| async move { c.get(key).await }).await?;
        let json = json.ok_or(FilterUnavailable::MetaMissing)?;
        let mut state: FilterState =
            serde_json::from_str(&json).map_err(|e| FilterUnavailable::Error(format!("bad filter metadata: {e}")))?;
        state.read_from = incarnation;
        Ok(state)
    }

    /// Every key matching `pattern` (SCAN: incremental, never blocks Redis), on every master.
    async fn scan_keys(&self, pattern: &str) -> Result<Vec<String>, FilterUnavailable> {
        let mut keys = Vec::new();
        match &self.backend {
            Backend::Single(_) => self.scan_node(None, pattern, &mut keys).await?,
            Backend::Cluster(cluster) => {
                for master in &cluster.topology()?.masters {
                    self.scan_node(Some(master), pattern, &mut keys).await?;
                }
            }
        }
        Ok(keys)
    }

    /// SCANs one node: the single Redis, or the cluster master at `master` (`host:port`).
    async fn scan_node(
        &self,
        master: Option<&str>,
        pattern: &str,
        keys: &mut Vec<String>,
    ) -> Result<(), FilterUnavailable> {
        let route = match master {
            None => None,
            Some(address) => Some(cluster::route_to(address)?),
        };
        let mut cursor: u64 = 0;
        loop {
            let mut scan = redis::cmd("SCAN");
            scan.arg(cursor).arg("MATCH").arg(pattern).arg("COUNT").arg(1000);
            let route = route.clone();
            let (next, batch): (u64, Vec<String>) = self
                .call(self.write_timeout, None, |c| async move {
                    match (c, route) {
                        (RedisConn::Cluster(mut c), Some(route)) => {
                            Ok(redis::from_redis_value(c.route_command(scan, route).await?)?)
                        }
                        (mut c, _) => scan.query_async(&mut c).await,
                    }
                })
                .await?;
            keys.extend(batch);
            if next == 0 {
                return Ok(());
            }
            cursor = next;
        }
    }
}

#[async_trait]
impl StateStore for RedisFilterStore {
    async fn state(&self, filter: &str) -> Result<FilterState, FilterUnavailable> {
        let filter = filter.to_owned();
        self.read_state(&filter, self.timeout).await
    }

    async fn state_for_write(&self, filter: &str) -> Result<FilterState, FilterUnavailable> {
        let filter = filter.to_owned();
        self.read_state(&filter, self.write_timeout).await
    }
}

#[async_trait]
impl LookupStore for RedisFilterStore {
    async fn may_contain(&self, filter: &str, meta: FilterMeta, hash: KeyHash) -> Result<bool, FilterUnavailable> {
        let at = meta.params.locate(&hash);
        let (bits, _) = segment_keys(filter, meta.generation, at.segment);
        let start = at.byte_offset_in_segment() as isize;
        let end = start + BLOCK_BYTES as isize - 1;
        let block: Vec<u8> =
            match self.backend {
                Backend::Single(_) => {
                    self.call(self.timeout, Some(meta.incarnation), |mut c| async move {
                        c.getrange(bits, start, end).await
                    })
                    .await?
                }
                Backend::Cluster(_) => {
                    let mut invocation = self.read_block.key(bits);
                    invocation.arg(start).arg(end);
                    self.run(self.timeout, Some(meta.incarnation), invocation).await?
                }
            };
        // A missing key reads as "" (not zeros) through GETRANGE: that, or a short string,
        // is a missing segment, never "not seen".
        let block: [u8; BLOCK_BYTES] = block.try_into().map_err(|_| FilterUnavailable::SegmentMissing(at.segment))?;
        Ok(bytes_contain(&block, &probe_mask(hash.probe_bits, meta.params.k)))
    }
}

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

#[async_trait]
impl CopySource for RedisFilterStore {
    async fn segment(&self, filter: &str, meta: FilterMeta, index: u32) -> Result<SegmentBits, FilterUnavailable> {
        let (bits, ver) = segment_keys(filter, meta.generation, index);
        let script = &self.read_segment;
        let (version, payload): (Option<String>, Option<Vec<u8>>) = self
            .run(self.write_timeout, Some(meta.incarnation), {
                let mut invocation = script.key(&bits);
                invocation.key(&ver);
                invocation
            })
            .await?;
        match (parse_version(version), payload) {
            (Some(version), Some(payload)) if payload.len() as u64 == meta.params.segment_bytes() => {
                Ok(SegmentBits { version, payload })
            }
            _ => Err(FilterUnavailable::SegmentMissing(index)),
        }
    }

    async fn journal_head(&self, filter: &str, meta: FilterMeta) -> Result<JournalPosition, FilterUnavailable> {
        let filter = filter.to_owned();
        self.head_of(&filter, meta).await.map(|(head, _)| head)
    }

    async fn catch_up_journal(
        &self,
        filter: &str,
        meta: FilterMeta,
        after: JournalPosition,
        max_entries: u32,
    ) -> Result<JournalRead, FilterUnavailable> {
        // The copy's position was read from this journal (never re-created, in this same
        // incarnation), so "nothing after my position" means caught up (`nothing_after` says
        // when that answer can be trusted). On a single Redis that is asked in one MULTI of two
        // plain commands whose replies are a few bytes, whatever the size of the last add (the
        // newest entry itself, an add of a thousand keys, is 16 KB); the link only reaches the
        // incarnation it knows, as for every plain read here. Anything else it answers (newer
        // entries, no journal, a retired one) is read by the script, which tells them apart.
        let single = matches!(self.backend, Backend::Single(_));
        if single {
            let key = journal_key(filter, meta.generation);
            let after_position = format!("({}", after.stream_id());
            let reply = self
                .call(self.timeout, Some(meta.incarnation), |mut c| async move {
                    redis::pipe()
                        .atomic()
                        .cmd("XRANGE")
                        .arg(&key)
                        .arg(after_position)
                        .arg("+")
                        .arg("COUNT")
                        .arg(1)
                        .cmd("XLEN")
                        .arg(&key)
                        .query_async::<(Vec<StreamEntry>, u64)>(&mut c)
                        .await
                })
                .await;
            match reply {
                Ok((newer, length)) if nothing_after(&newer, length) => return Ok(JournalRead::caught_up(after)),
                Err(e @ (FilterUnavailable::Timeout | FilterUnavailable::Incarnation)) => return Err(e),
                _ => {}
            }
        }
        // On a cluster the script asks "is the newest entry mine?" itself (a plain command
        // there cannot refuse a promoted replica); on a single Redis it was just asked.
        self.read_journal_within(self.timeout, filter, meta, after, max_entries, !single).await
    }
}

#[async_trait]
impl EdgeFeedStore for RedisFilterStore {
    async fn segment_versions(&self, filter: &str, meta: FilterMeta) -> Result<Vec<u64>, FilterUnavailable> {
        let ver = |index| segment_keys(filter, meta.generation, index).1;
        let versions: Vec<Option<String>> =
            match self.backend {
                Backend::Single(_) => {
                    let mut pipe = redis::pipe();
                    for index in 0..meta.params.segment_count {
                        pipe.get(ver(index));
                    }
                    self.call(self.write_timeout, Some(meta.incarnation), |mut c| async move {
                        pipe.query_async(&mut c).await
                    })
                    .await?
                }
                // Each version is in its own slot: one guarded read each, all at once.
                Backend::Cluster(_) => {
                    let reads = (0..meta.params.segment_count).map(|index| {
                        self.run(self.write_timeout, Some(meta.incarnation), self.read_version.key(ver(index)))
                    });
                    futures::future::try_join_all(reads).await?
                }
            };
        versions
            .into_iter()
            .enumerate()
            .map(|(i, v)| parse_version(v).ok_or(FilterUnavailable::SegmentMissing(i as u32)))
            .collect()
    }

    async fn read_journal(
        &self,
        filter: &str,
        meta: FilterMeta,
        after: JournalPosition,
        max_entries: u32,
    ) -> Result<JournalRead, FilterUnavailable> {
        self.read_journal_within(self.write_timeout, filter, meta, after, max_entries, false).await
    }
}

#[async_trait]
impl StatsStore for RedisFilterStore {
    async fn deletes(&self, filter: &str, meta: FilterMeta) -> Result<u64, FilterUnavailable> {
        let key = deletes_key(filter, meta.generation);
        let n: Option<u64> = self.call(self.write_timeout, None, |mut c| async move { c.get(key).await }).await?;
        Ok(n.unwrap_or(0))
    }

    async fn progress(&self, filter: &str) -> Result<Option<BuildProgress>, FilterUnavailable> {
        let key = progress_key(filter);
        let json: Option<String> = self.call(self.write_timeout, None, |mut c| async move { c.get(key).await }).await?;
        // Unreadable progress is no progress: it is advisory.
        Ok(json.and_then(|j| serde_json::from_str(&j).ok()))
    }

    async fn segments_intact(&self, filter: &str, meta: FilterMeta) -> Result<(), FilterUnavailable> {
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
                    let mut call = self.segment_size.key(bits);
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

    async fn lease_holder(&self, filter: &str) -> Result<Option<String>, FilterUnavailable> {
        let key = lease_key(filter);
        self.call(self.write_timeout, None, |mut c| async move { c.get(key).await }).await
    }

    async fn count_ones(&self, filter: &str, meta: FilterMeta) -> Result<u64, FilterUnavailable> {
        let filter = filter.to_owned();
        let (ones, _) = self.count_sampled(&filter, meta, meta.params.segment_count).await?;
        Ok(ones)
    }

    async fn count_ones_sampled(
        &self,
        filter: &str,
        meta: FilterMeta,
        max_segments: u32,
    ) -> Result<(u64, u32), FilterUnavailable> {
        let filter = filter.to_owned();
        self.count_sampled(&filter, meta, max_segments).await
    }

    async fn memory_bytes(&self, _filter: &str, meta: FilterMeta) -> Result<Option<u64>, FilterUnavailable> {
        Ok(Some(meta.params.total_bytes()))
    }

    async fn journal_size(&self, filter: &str, meta: FilterMeta) -> Result<JournalSize, FilterUnavailable> {
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

#[async_trait]
impl LifecycleStore for RedisFilterStore {
    #[instrument(skip(self, meta))]
    async fn create_generation(&self, filter: &str, meta: FilterMeta) -> Result<(), FilterUnavailable> {
        let filter = filter.to_owned();
        let size = meta.params.segment_bytes();
        for index in 0..meta.params.segment_count {
            let (bits, ver) = segment_keys(&filter, meta.generation, index);
            let script = &self.create_segment;
            let len: u64 = self
                .run(self.write_timeout, Some(meta.incarnation), {
                    let mut invocation = script.key(&bits);
                    invocation.key(&ver).arg(size);
                    invocation
                })
                .await?;
            if len != size {
                return Err(FilterUnavailable::Error(format!(
                    "segment {index} of generation {} is {len} bytes, expected {size}: delete the filter's keys in Redis and rebuild",
                    meta.generation
                )));
            }
        }
        if !meta.journal {
            return Ok(());
        }
        // The journal starts with one entry, so it exists (appends never create it).
        let journal = journal_key(&filter, meta.generation);
        let _: i64 = self.run(self.write_timeout, Some(meta.incarnation), self.init_journal.key(journal)).await?;
        Ok(())
    }

    /// On a cluster, read now: a generation about to be created must name today's masters.
    async fn incarnation(&self) -> Result<u64, FilterUnavailable> {
        let timed_out = |_| FilterUnavailable::Timeout;
        match &self.backend {
            Backend::Single(link) => {
                Ok(tokio::time::timeout(self.write_timeout, link.get()).await.map_err(timed_out)??.incarnation)
            }
            Backend::Cluster(cluster) => {
                Ok(tokio::time::timeout(self.write_timeout, cluster.refresh()).await.map_err(timed_out)??.incarnation)
            }
        }
    }

    async fn replace_state(
        &self,
        filter: &str,
        expected: Option<u64>,
        state: FilterState,
    ) -> Result<bool, FilterUnavailable> {
        let key = meta_key(filter);
        let state = FilterState { revision: expected.map_or(1, |r| r + 1), ..state };
        let json = serde_json::to_string(&state).map_err(|e| FilterUnavailable::Error(e.to_string()))?;
        let expected: i64 = expected.map_or(-1, |r| r as i64);
        let script = &self.replace_state;
        let replaced: i64 = self
            .run(self.write_timeout, None, {
                let mut invocation = script.key(&key);
                invocation.arg(expected).arg(json);
                invocation
            })
            .await?;
        Ok(replaced == 1)
    }

    async fn merge_segment(
        &self,
        filter: &str,
        meta: FilterMeta,
        index: u32,
        payload: Vec<u8>,
    ) -> Result<(), FilterUnavailable> {
        let (bits, ver) = segment_keys(filter, meta.generation, index);
        let upload = upload_key(filter, meta.generation, index);
        let script = &self.merge;
        let version: i64 = self
            .run(self.write_timeout, Some(meta.incarnation), {
                let mut invocation = script.key(&bits);
                invocation.key(&ver).key(&upload).arg(payload);
                invocation
            })
            .await?;
        if version < 0 {
            return Err(FilterUnavailable::SegmentMissing(index));
        }
        Ok(())
    }

    async fn set_progress(&self, filter: &str, progress: BuildProgress) -> Result<(), FilterUnavailable> {
        let key = progress_key(filter);
        let json = serde_json::to_string(&progress).map_err(|e| FilterUnavailable::Error(e.to_string()))?;
        self.call(
            self.write_timeout,
            None,
            |mut c| async move { c.pset_ex::<_, _, ()>(key, json, PROGRESS_TTL_MS).await },
        )
        .await
    }

    async fn retire_generation(&self, filter: &str, meta: FilterMeta) -> Result<(), FilterUnavailable> {
        let filter = filter.to_owned();
        for index in 0..meta.params.segment_count {
            let (bits, ver) = segment_keys(&filter, meta.generation, index);
            let script = &self.retire;
            // Any incarnation: retiring a stale generation's keys is what they are for.
            let _: i64 = self
                .run(self.write_timeout, None, {
                    let mut invocation = script.key(&bits);
                    invocation.key(&ver).arg(RETIRED_MARKER_MS);
                    invocation
                })
                .await?;
        }
        let journal = journal_key(&filter, meta.generation);
        let script = &self.retire_journal;
        let _: i64 = self
            .run(self.write_timeout, None, {
                let mut invocation = script.key(&journal);
                invocation.arg(RETIRED_MARKER_MS);
                invocation
            })
            .await?;
        let deletes = deletes_key(&filter, meta.generation);
        self.call(self.write_timeout, None, |mut c| async move { c.del::<_, ()>(&deletes).await }).await
    }

    async fn delete_orphans(&self, filter: &str, keep: Vec<u64>) -> Result<u64, FilterUnavailable> {
        let filter = filter.to_owned();
        let mut keys = self.scan_keys(&format!("bg:{{{filter}:*")).await?;
        keys.extend(self.scan_keys(&format!("bg:{{{filter}}}:deletes:*")).await?);
        keys.extend(self.scan_keys(&format!("bg:{{{filter}}}:jnl:*")).await?);
        let mut deleted = 0u64;
        for key in keys {
            let Some(generation) = generation_of_key(&filter, &key) else { continue };
            if keep.contains(&generation) {
                continue;
            }
            let script = &self.delete_unless_retired;
            let n: u64 = if key.ends_with(":ver") || key.contains(":jnl:") {
                self.run(self.write_timeout, None, script.key(&key)).await?
            } else {
                self.call(self.write_timeout, None, |mut c| async move { c.del(&key).await }).await?
            };
            deleted += n;
        }
        Ok(deleted)
    }

    async fn clear_dropped(&self, filter: &str) -> Result<u64, FilterUnavailable> {
        let generations = self.delete_orphans(filter, Vec::new()).await?;
        let (progress, lease) = (progress_key(filter), lease_key(filter));
        let bookkeeping: u64 =
            self.call(self.write_timeout, None, |mut c| async move { c.del(&[progress, lease]).await }).await?;
        Ok(generations + bookkeeping)
    }

    async fn lease(&self, filter: &str, owner: &str, ttl: Duration) -> Result<bool, FilterUnavailable> {
        let (key, owner) = (lease_key(filter), owner.to_owned());
        let script = &self.lease;
        let held: i64 = self
            .run(self.write_timeout, None, {
                let mut invocation = script.key(&key);
                invocation.arg(&owner).arg(ttl.as_millis() as u64);
                invocation
            })
            .await?;
        Ok(held == 1)
    }

    async fn release_lease(&self, filter: &str, owner: &str) -> Result<(), FilterUnavailable> {
        let (key, owner) = (lease_key(filter), owner.to_owned());
        let script = &self.release;
        let _: i64 = self
            .run(self.write_timeout, None, {
                let mut invocation = script.key(&key);
                invocation.arg(&owner);
                invocation
            })
            .await?;
        Ok(())
    }
}

#[async_trait]
impl FilterStore for RedisFilterStore {
    async fn ping(&self) -> Result<(), FilterUnavailable> {
        self.call(self.timeout, None, |mut c| async move { redis::cmd("PING").query_async::<String>(&mut c).await })
            .await
            .map(|_| ())
    }
}

/// A stream entry as XRANGE returns it: its id and its field/value pairs.
type StreamEntry = (String, Vec<(String, Vec<u8>)>);

/// Whether a journal read atomically as `newer` (its entries after a position, at most one)
/// and `length` (its entry count) holds nothing after that position, for a position read from
/// this journal. An empty answer alone is not enough: a journal deleted (flushed, evicted) reads
/// as empty too, and so would one trimmed to nothing. But entries are only ever trimmed oldest
/// first, so what a journal holds is always the newest of all its entries; if it holds any,
/// and none is after the position, no entry after the position was ever appended.
fn nothing_after(newer: &[StreamEntry], length: u64) -> bool {
    newer.is_empty() && length > 0
}

/// Interprets READ_JOURNAL_SCRIPT's reply for a caller at `after` (see `JournalRead`).
fn parse_journal_read(
    reply: &[redis::Value],
    after: JournalPosition,
    max: u32,
) -> Result<JournalRead, FilterUnavailable> {
    let bad = |what: &str| FilterUnavailable::Error(format!("unexpected journal reply: {what}"));
    let [redis::Value::Int(1), max_deleted, added, _last, entries] = reply else {
        return match reply.first() {
            Some(redis::Value::Int(0)) => Err(FilterUnavailable::SegmentMissing(0)),
            Some(redis::Value::Int(2)) => Ok(JournalRead::caught_up(after)),
            _ => Err(bad("shape")),
        };
    };
    let max_deleted: String = redis::from_redis_value_ref(max_deleted).map_err(|_| bad("max-deleted-entry-id"))?;
    let added: u64 = redis::from_redis_value_ref(added).map_err(|_| bad("entries-added"))?;
    let deleted = parse_stream_id(&max_deleted).ok_or_else(|| bad("max-deleted-entry-id"))?;
    // An entry after the caller's position was trimmed: what it holds cannot be brought up to
    // date entry by entry.
    if deleted > (after.id_ms, after.id_seq) || after.added > added {
        return Ok(JournalRead::Reset);
    }
    let entries: Vec<StreamEntry> = redis::from_redis_value_ref(entries).map_err(|_| bad("entries"))?;
    let count = entries.len() as u64;
    // Without a COUNT cut, the entries after the position are exactly the ones added since: a
    // position that is not this journal's would not add up.
    if (count < u64::from(max) && after.added + count != added) || after.added + count > added {
        return Ok(JournalRead::Reset);
    }
    let mut to = after;
    let mut out = Vec::with_capacity(entries.len());
    for (id, fields) in entries {
        let (id_ms, id_seq) = parse_stream_id(&id).ok_or_else(|| bad("entry id"))?;
        to = JournalPosition { added: to.added + 1, id_ms, id_seq };
        let mut hashes = Vec::new();
        for (field, value) in fields {
            if field == "h" {
                hashes.extend(decode_hashes(&value).ok_or_else(|| bad("entry length"))?);
            }
        }
        out.push(hashes);
    }
    Ok(JournalRead::Entries { to, entries: out, head: added })
}

impl RedisFilterStore {
    /// Up to `max_entries` journal entries after `after`, under `timeout`; `own_position`: the
    /// position was read from this journal (see READ_JOURNAL_SCRIPT).
    async fn read_journal_within(
        &self,
        timeout: Duration,
        filter: &str,
        meta: FilterMeta,
        after: JournalPosition,
        max_entries: u32,
        own_position: bool,
    ) -> Result<JournalRead, FilterUnavailable> {
        let key = journal_key(filter, meta.generation);
        let script = &self.read_journal;
        let after_id = after.stream_id();
        let reply: Vec<redis::Value> = self
            .run(timeout, Some(meta.incarnation), {
                let mut invocation = script.key(&key);
                invocation.arg(after_id).arg(max_entries).arg(u8::from(own_position));
                invocation
            })
            .await?;
        parse_journal_read(&reply, after, max_entries)
    }

    /// The journal's head and length.
    async fn head_of(&self, filter: &str, meta: FilterMeta) -> Result<(JournalPosition, u64), FilterUnavailable> {
        let key = journal_key(filter, meta.generation);
        let script = &self.journal_head;
        let reply: Vec<redis::Value> = self.run(self.write_timeout, Some(meta.incarnation), script.key(&key)).await?;
        let bad = || FilterUnavailable::Error("unexpected XINFO STREAM reply".into());
        match reply.as_slice() {
            [redis::Value::Int(1), added, last, length] => {
                let added: u64 = redis::from_redis_value_ref(added).map_err(|_| bad())?;
                let last: String = redis::from_redis_value_ref(last).map_err(|_| bad())?;
                let length: u64 = redis::from_redis_value_ref(length).map_err(|_| bad())?;
                let (id_ms, id_seq) = parse_stream_id(&last).ok_or_else(bad)?;
                Ok((JournalPosition { added, id_ms, id_seq }, length))
            }
            _ => Err(FilterUnavailable::SegmentMissing(0)),
        }
    }

    async fn count_sampled(&self, filter: &str, meta: FilterMeta, max: u32) -> Result<(u64, u32), FilterUnavailable> {
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

    /// An ADD_SCRIPT call setting the bits of `segments` (`segment → bit offsets`), then, with
    /// `entry`, appending it to the generation's journal.
    fn add_call<'a>(
        &'a self,
        filter: &str,
        meta: FilterMeta,
        segments: impl Iterator<Item = (&'a u32, &'a Vec<u64>)>,
        entry: Option<Vec<u8>>,
    ) -> ScriptInvocation<'a> {
        let mut call = self.add.prepare_invoke();
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
    async fn wait_for_replicas(&self, cluster: &ClusterLink) -> Result<(), FilterUnavailable> {
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

    #[test]
    fn keys_name_their_generation() {
        assert_eq!(generation_of_key("f", "bg:{f:1700000000000:3}:bits"), Some(1_700_000_000_000));
        assert_eq!(generation_of_key("f", "bg:{f:17:3}:ver"), Some(17));
        assert_eq!(generation_of_key("f", "bg:{f}:deletes:17"), Some(17));
        assert_eq!(generation_of_key("f", "bg:{f}:meta"), None);
        assert_eq!(generation_of_key("f", "bg:{f-2:17:3}:bits"), None, "another filter");
    }

    #[test]
    fn samples_spread_over_the_generation() {
        assert_eq!(sample_indices(5, 16).collect::<Vec<_>>(), [0, 1, 2, 3, 4]);
        let sampled: Vec<u32> = sample_indices(1907, 16).collect();
        assert!(sampled.len() <= 16 && sampled.len() >= 15, "{sampled:?}");
        assert!(*sampled.last().unwrap() > 1700);
    }

    #[test]
    fn journal_replies_cover_the_position_or_say_reset() {
        use redis::Value::{Array, BulkString, Int};
        let s = |t: &str| BulkString(t.as_bytes().to_vec());
        let entry = |id: &str, hashes: &[u8]| Array(vec![s(id), Array(vec![s("h"), BulkString(hashes.to_vec())])]);
        let after = JournalPosition { added: 5, id_ms: 100, id_seq: 0 };
        let h = [7u8; HASH_BYTES];
        let reply = [Int(1), s("90-0"), Int(7), s("102-0"), Array(vec![entry("101-0", &h), entry("102-0", &[])])];
        let JournalRead::Entries { to, entries, head } = parse_journal_read(&reply, after, 100).unwrap() else {
            panic!()
        };
        assert_eq!(to, JournalPosition { added: 7, id_ms: 102, id_seq: 0 });
        assert_eq!(entries.iter().map(Vec::len).collect::<Vec<_>>(), [1, 0]);
        assert_eq!(head, 7, "read to the head");
        // A COUNT cut: short of the head, and it says so.
        let cut = [Int(1), s("90-0"), Int(9), s("104-0"), Array(vec![entry("101-0", &h), entry("102-0", &[])])];
        let JournalRead::Entries { to, head, .. } = parse_journal_read(&cut, after, 2).unwrap() else { panic!() };
        assert_eq!((to.added, head), (7, 9));
        // Trimmed past the position: the entries in between are gone.
        let trimmed = [Int(1), s("100-1"), Int(7), s("102-0"), Array(vec![])];
        assert_eq!(parse_journal_read(&trimmed, after, 100).unwrap(), JournalRead::Reset);
        // A position that does not add up with this journal (7 added, 5 + 1 seen).
        let short = [Int(1), s("0-0"), Int(7), s("102-0"), Array(vec![entry("102-0", &[])])];
        assert_eq!(parse_journal_read(&short, after, 100).unwrap(), JournalRead::Reset);
        assert!(matches!(parse_journal_read(&[Int(0)], after, 100), Err(FilterUnavailable::SegmentMissing(0))));
        let newer = vec![("101-0".to_owned(), Vec::new())];
        assert!(nothing_after(&[], 3), "entries, none after the position: caught up");
        assert!(!nothing_after(&newer, 3), "a newer entry: read it");
        assert!(!nothing_after(&[], 0), "no journal, or one trimmed to nothing: the script tells which");
        let caught_up = JournalRead::Entries { to: after, entries: Vec::new(), head: 5 };
        assert_eq!(
            parse_journal_read(&[Int(2)], after, 100).unwrap(),
            caught_up,
            "nothing after the caller's position"
        );
        assert_eq!(JournalRead::caught_up(after), caught_up);
    }

    #[test]
    fn only_numbers_are_versions() {
        assert_eq!(parse_version(Some("12".into())), Some(12));
        assert_eq!(parse_version(Some("retired".into())), None);
        assert_eq!(parse_version(None), None);
    }
}
