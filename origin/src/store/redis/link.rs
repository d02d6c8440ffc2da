//! One multiplexed connection to Redis that knows which Redis *process* it talks to.
//!
//! Redis can go back in time: restarted from an RDB/AOF snapshot, or replaced by a replica
//! that had not received the last writes, it keeps the filter's keys but loses recent bits.
//! The process is new then, with a new `run_id`. Or the same process loses them: demoted
//! (`REPLICAOF`, a Sentinel or Cluster failover), it resynchronises its whole data set from its
//! new master, and promoted again it answers with the same `run_id` and the other's data. Its
//! replication history tells: a full resynchronisation takes the master's `master_replid`, and
//! a promotion starts a new one. So a Redis process is known by its *identity*,
//! `run_id:master_replid`, read by every connection right after connecting, before it carries
//! any command; the *incarnation* a generation records is a fingerprint of the identity. And
//! since a demotion does not close the connection, every script checks the identity again
//! inside Redis, atomically with its work (`scripts/guard.lua`), and a refusal replaces the
//! connection: bits recorded under another incarnation are never read or written (see
//! `store::state`).
//!
//! A connection that failed (dropped, refused, or several timeouts in a row) is replaced on the
//! next call; reconnecting is attempted at most every `RECONNECT_BACKOFF`, so a Redis that is
//! down costs lookups nothing but a fast fall-through.

use crate::store::{FilterUnavailable, StoreResult};
use futures::future::{BoxFuture, Shared};
use futures::FutureExt;
use redis::aio::MultiplexedConnection;
use redis::AsyncConnectionConfig;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long after a failed connect the next one is tried; calls meanwhile fail at once.
const RECONNECT_BACKOFF: Duration = Duration::from_millis(250);
/// Consecutive timeouts after which a connection is presumed dead (a peer that vanished
/// without closing the socket) and replaced.
const TIMEOUTS_BEFORE_RECONNECT: u32 = 3;

/// A live connection and the incarnation of the server it reached.
pub struct Link {
    /// The connection (cheap to clone: a handle to one multiplexed socket).
    pub conn: MultiplexedConnection,
    /// The server's identity when connected (`run_id:master_replid`).
    pub identity: String,
    /// The server's incarnation (a fingerprint of its identity).
    pub incarnation: u64,
    timeouts: AtomicU32,
}

/// The origin's connection to Redis, replaced when it fails. Cheap to clone.
#[derive(Clone)]
pub struct RedisLink {
    inner: Arc<Inner>,
}

type Connecting = Shared<BoxFuture<'static, StoreResult<Arc<Link>>>>;

struct Inner {
    client: redis::Client,
    config: AsyncConnectionConfig,
    connect_timeout: Duration,
    current: Mutex<Option<Arc<Link>>>,
    /// A connect under way, awaited by every caller that needs it. It runs as its own task,
    /// so a caller giving up (a lookup's short timeout) does not cancel it.
    connecting: Mutex<Option<Connecting>>,
    /// When the last connect failed, and why: callers within `RECONNECT_BACKOFF` of it are
    /// told why without another attempt (readiness shows it).
    last_failure: Mutex<Option<(Instant, String)>>,
}

/// What to check, for the failures whose driver message does not say: a plaintext client on
/// a TLS port reads as a connection closed, and a refused password as an auth error.
fn connect_hint(e: &redis::RedisError, client: &redis::Client) -> &'static str {
    let tls = matches!(client.get_connection_info().addr(), redis::ConnectionAddr::TcpTls { .. });
    let message = e.to_string().to_ascii_lowercase();
    if !tls && (e.is_connection_dropped() || message.contains("reset") || message.contains("end of file")) {
        " (if this Redis serves TLS, use a rediss:// URL)"
    } else if ["wrongpass", "noauth", "noperm", "authentication"].iter().any(|w| message.contains(w)) {
        " (check redis_user and redis_password or redis_password_file)"
    } else if tls && message.contains("certificate") {
        " (check redis_tls_ca_file: it must hold the CA that signed the server's certificate)"
    } else {
        ""
    }
}

/// A field of a server's `INFO` text, by its exact name (`master_repl_offset` is not
/// `master_repl_offset2`).
pub fn info_field<'a>(info: &'a str, name: &str) -> Option<&'a str> {
    info.lines().find_map(|l| l.trim().strip_prefix(name)?.strip_prefix(':').map(str::trim))
}

/// A Redis process and its replication history, from its `INFO server` and `INFO replication`
/// texts: `run_id:master_replid`. None without a usable `run_id` or a `master_replid`.
pub fn identity_from_info(info: &str) -> Option<String> {
    let run_id = info_field(info, "run_id")?;
    let usable = run_id.len() >= 16 && u64::from_str_radix(&run_id[..16], 16).is_ok_and(|v| v != 0);
    let replid = info_field(info, "master_replid")?;
    (usable && !replid.is_empty()).then(|| format!("{run_id}:{replid}"))
}

/// The incarnation of the Redis processes named by `identities` (sorted): FNV-1a over them,
/// stable across processes and builds (a generation records it, and every origin must compute
/// the same number). 0 is reserved for "no incarnation".
pub fn incarnation_of(sorted_identities: &[String]) -> u64 {
    // Negative control (test builds only): every Redis process is the same incarnation.
    if crate::planted::active(crate::planted::Bug::SkipIncarnationCheck) {
        return 1;
    }
    fingerprint(sorted_identities)
}

fn fingerprint(sorted: &[String]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in sorted.iter().flat_map(|id| id.bytes().chain([b','])) {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash.max(1)
}

/// Locks `m`, through a poisoning: what it guards stays valid whatever panicked holding it.
pub(super) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl RedisLink {
    /// A link that connects on first use. `response_timeout` bounds the slowest call the
    /// store makes (callers bound their own calls more tightly).
    pub fn new(client: redis::Client, response_timeout: Duration, connect_timeout: Duration) -> RedisLink {
        let config = AsyncConnectionConfig::new()
            .set_response_timeout(Some(response_timeout))
            .set_connection_timeout(Some(connect_timeout));
        let inner = Inner {
            client,
            config,
            connect_timeout,
            current: Mutex::new(None),
            connecting: Mutex::new(None),
            last_failure: Mutex::new(None),
        };
        RedisLink { inner: Arc::new(inner) }
    }

    /// The current connection, connecting (and learning the incarnation) if there is none.
    pub async fn get(&self) -> StoreResult<Arc<Link>> {
        if let Some(link) = lock(&self.inner.current).clone() {
            return Ok(link);
        }
        let connecting = {
            let mut connecting = lock(&self.inner.connecting);
            match connecting.as_ref() {
                Some(shared) => shared.clone(),
                None => {
                    if let Some((at, why)) = lock(&self.inner.last_failure).as_ref() {
                        if at.elapsed() < RECONNECT_BACKOFF {
                            return Err(FilterUnavailable::Error(format!("{why}; reconnecting")));
                        }
                    }
                    let inner = self.inner.clone();
                    let task = tokio::spawn(async move { inner.connect_and_keep().await });
                    let shared = async move {
                        task.await.unwrap_or_else(|e| Err(FilterUnavailable::Error(format!("Redis connect: {e}"))))
                    }
                    .boxed()
                    .shared();
                    *connecting = Some(shared.clone());
                    shared
                }
            }
        };
        connecting.await
    }

    /// Reports how a call over `link` went, replacing the connection when it is broken.
    pub fn report(&self, link: &Arc<Link>, outcome: CallOutcome) {
        let broken = match outcome {
            CallOutcome::Answered => {
                link.timeouts.store(0, Ordering::Relaxed);
                false
            }
            CallOutcome::TimedOut => link.timeouts.fetch_add(1, Ordering::Relaxed) + 1 >= TIMEOUTS_BEFORE_RECONNECT,
            CallOutcome::ConnectionFailed => true,
        };
        if broken {
            let mut current = lock(&self.inner.current);
            if current.as_ref().is_some_and(|c| Arc::ptr_eq(c, link)) {
                tracing::warn!("Redis connection lost; reconnecting on the next call");
                *current = None;
            }
        }
    }
}

impl Inner {
    /// Connects, then publishes the result: the new link, or the time of the failure.
    async fn connect_and_keep(&self) -> StoreResult<Arc<Link>> {
        let result = match tokio::time::timeout(self.connect_timeout * 2, self.connect()).await {
            Ok(result) => result.map(Arc::new),
            Err(_) => Err(FilterUnavailable::Timeout),
        };
        match &result {
            Ok(link) => {
                *lock(&self.current) = Some(link.clone());
                *lock(&self.last_failure) = None;
            }
            Err(e) => {
                let why = match e {
                    FilterUnavailable::Error(why) => why.clone(),
                    other => other.to_string(),
                };
                *lock(&self.last_failure) = Some((Instant::now(), why));
            }
        }
        *lock(&self.connecting) = None;
        result
    }

    async fn connect(&self) -> StoreResult<Link> {
        let unavailable = |e: redis::RedisError| {
            FilterUnavailable::Error(format!("cannot connect to Redis: {e}{}", connect_hint(&e, &self.client)))
        };
        let mut conn =
            self.client.get_multiplexed_async_connection_with_config(&self.config).await.map_err(unavailable)?;
        // Before this connection carries anything: which process, with which history, is this?
        let (server, replication): (String, String) = redis::pipe()
            .cmd("INFO")
            .arg("server")
            .cmd("INFO")
            .arg("replication")
            .query_async(&mut conn)
            .await
            .map_err(unavailable)?;
        let identity = identity_from_info(&format!("{server}\n{replication}"))
            .ok_or_else(|| FilterUnavailable::Error("Redis INFO has no run_id or master_replid".into()))?;
        let incarnation = incarnation_of(std::slice::from_ref(&identity));
        tracing::info!(incarnation = format!("{incarnation:016x}"), "connected to Redis");
        Ok(Link { conn, identity, incarnation, timeouts: AtomicU32::new(0) })
    }
}

/// How a call over a link ended, as far as the link is concerned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallOutcome {
    /// The server answered (possibly with an error reply).
    Answered,
    /// No answer within the call's timeout.
    TimedOut,
    /// The connection is broken (reset, closed, refused).
    ConnectionFailed,
}

impl CallOutcome {
    /// Classifies a driver error.
    pub fn of_error(err: &redis::RedisError) -> CallOutcome {
        if err.is_timeout() {
            CallOutcome::TimedOut
        } else if err.is_io_error() || err.is_connection_dropped() || err.is_unrecoverable_error() {
            CallOutcome::ConnectionFailed
        } else {
            CallOutcome::Answered
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_identity_is_the_run_id_and_the_replication_history() {
        let run_id = "run_id:4bd5b8a1f3c2e9d07a6b5c4d3e2f1a0b9c8d7e6f";
        let info = format!("# Server\r\nredis_version:7.0.15\r\n{run_id}\r\n# Replication\r\nrole:master\r\nmaster_replid:9d42aa\r\nmaster_replid2:0000\r\n");
        assert_eq!(identity_from_info(&info).as_deref(), Some("4bd5b8a1f3c2e9d07a6b5c4d3e2f1a0b9c8d7e6f:9d42aa"));
        assert_eq!(identity_from_info(&format!("{run_id}\r\n")), None, "no replication history");
        assert_eq!(identity_from_info("run_id:xyz\r\nmaster_replid:9d42aa\r\n"), None);
        assert_eq!(identity_from_info("run_id:0000000000000000aaaa\r\nmaster_replid:9d42aa\r\n"), None);
        // Demoted, resynchronised and promoted again: the same process, another history.
        let failed_back = info.replace("master_replid:9d42aa", "master_replid:77e1c0");
        let (before, after) = (identity_from_info(&info).unwrap(), identity_from_info(&failed_back).unwrap());
        assert_ne!(incarnation_of(&[before]), incarnation_of(&[after]));
    }

    #[test]
    fn the_fingerprint_is_stable_across_builds() {
        // Recorded in generations and compared by every origin: it must never change.
        assert_eq!(fingerprint(&["ab".into()]), 0xe71f_df19_0541_bef2);
    }

    #[test]
    fn info_fields_are_found_by_exact_name() {
        let info = "# Replication\r\nrole:master\r\nmaster_repl_offset:1234\r\nmaster_repl_offset2:9\r\n";
        assert_eq!(info_field(info, "master_repl_offset"), Some("1234"));
        assert_eq!(info_field(info, "role"), Some("master"));
        assert_eq!(info_field(info, "connected_slaves"), None);
    }
}
