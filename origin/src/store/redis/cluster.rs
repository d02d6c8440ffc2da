//! The origin's connection to a Redis *Cluster*, and which Redis processes hold its slots.
//!
//! On one Redis, a new process means a new connection, so [`super::link`] learns the
//! incarnation once per connection. A cluster client reconnects, follows `MOVED` and learns a
//! promoted replica on its own, so no connection can vouch for the process a command reaches.
//! The check moves into Redis instead: every script the store sends carries the identities
//! (`run_id:master_replid`, see `link`) of the masters its generation was created on and,
//! atomically with its work, refuses to run on any other process or history ([`GUARD_PRELUDE`]).
//! A replica promoted after its master died, a master restarted from an older snapshot, or a
//! master paused, failed over, resynchronised from its promoted replica and failed back (the
//! same `run_id`, the other's data and a new `master_replid`) is another identity: the filter's
//! bits there are never read or written again, and the recovery check rebuilds on the masters
//! as they are.
//!
//! The cluster's *incarnation* is a fingerprint of its masters' identities, read every
//! `TOPOLOGY_REFRESH` (and at once after a script refused): it is what a generation records,
//! so a generation created before a failover reads as "of another incarnation", exactly as a
//! restarted single Redis does. Moving slots between the same masters keeps the fingerprint
//! (MIGRATE moves the bits intact); adding a master changes it and costs a rebuild.

use super::link::{identity_from_info, incarnation_of, lock, CallOutcome};
use crate::store::{FilterUnavailable, StoreResult};
use redis::cluster::{ClusterClient, ClusterClientBuilder};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{MultipleNodeRoutingInfo, RoutingInfo, SingleNodeRoutingInfo};
use redis::Value;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;

/// How often the masters' `run_id`s are read again.
const TOPOLOGY_REFRESH: Duration = Duration::from_secs(1);
/// Calls in a row that time out or fail on the connection before it is replaced.
const FAILURES_BEFORE_RECONNECT: u32 = 3;
/// How long after replacing the connection it may be replaced again.
const RECONNECT_BACKOFF: Duration = Duration::from_secs(1);

/// The error code a guarded script answers with on a process the generation does not know.
pub const REFUSED_CODE: &str = "BGINCARNATION";

/// Prepended to every script: the script refuses to run on any process but those whose
/// identities its last arguments name (the contract is at the top of the file).
pub const GUARD_PRELUDE: &str = include_str!("scripts/guard.lua");

/// The masters that hold the cluster's slots, as one incarnation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Topology {
    /// Fingerprint of the masters' identities (order-independent, never 0).
    pub incarnation: u64,
    /// Each master's identity (`run_id:master_replid`), sorted.
    pub identities: Vec<String>,
    /// Each master's address (`host:port`), for commands every master must run (SCAN).
    pub masters: Vec<String>,
}

impl Topology {
    /// The topology described by each master's address and `INFO server replication` text.
    pub fn from_infos<'a>(infos: impl IntoIterator<Item = (&'a str, &'a str)>) -> Result<Topology, String> {
        let mut identities = Vec::new();
        let mut masters = Vec::new();
        for (address, info) in infos {
            masters.push(address.to_owned());
            identities.push(identity_from_info(info).ok_or("a master's INFO has no run_id or master_replid")?);
        }
        if identities.is_empty() {
            return Err("the cluster has no master".into());
        }
        identities.sort();
        identities.dedup();
        masters.sort();
        Ok(Topology { incarnation: incarnation_of(&identities), identities, masters })
    }
}

/// A cluster connection and the last topology read. The client reconnects and re-routes on
/// its own, but after a failover under load it can keep waiting on a node that is gone (every
/// call timing out for a minute and more); so, as the single-Redis link does, a connection
/// whose calls keep timing out is replaced by a fresh one, which learns the slots anew.
#[derive(Clone)]
pub struct ClusterLink {
    client: Arc<ClusterClient>,
    /// The connection; `Err` with why until one has been made (the cluster may be down when
    /// the origin starts: it connects in the background).
    conn: Arc<Mutex<Result<ClusterConnection, String>>>,
    /// Calls in a row that timed out or found the connection broken, over every caller.
    failures: Arc<AtomicU32>,
    replacing: Arc<AtomicBool>,
    connect_timeout: Duration,
    topology: Arc<Mutex<Option<Arc<Topology>>>>,
    refresh_now: Arc<Notify>,
}

impl ClusterLink {
    /// Connects to the cluster through any of the nodes `builder` names and reads its
    /// topology, or, if no node answers, goes on without and connects in the background; then
    /// keeps the topology current. Errs only on settings the client refuses.
    pub async fn connect(
        builder: ClusterClientBuilder,
        response_timeout: Duration,
        connect_timeout: Duration,
    ) -> StoreResult<ClusterLink> {
        let client = builder
            .response_timeout(response_timeout)
            .connection_timeout(connect_timeout)
            .retries(2)
            .build()
            .map_err(|e| FilterUnavailable::Error(format!("redis_cluster_nodes: {e}")))?;
        let conn = open(&client, connect_timeout).await;
        if let Err(cause) = &conn {
            tracing::warn!(%cause, "cannot reach the Redis Cluster yet; connecting in the background");
        }
        let link = ClusterLink {
            client: Arc::new(client),
            conn: Arc::new(Mutex::new(conn)),
            failures: Arc::default(),
            replacing: Arc::default(),
            connect_timeout,
            topology: Arc::default(),
            refresh_now: Arc::default(),
        };
        if let Err(err) = link.refresh().await {
            tracing::warn!(cause = %err, "cannot read the Redis Cluster's masters yet; retrying");
        }
        let background = link.clone();
        tokio::spawn(async move { background.keep_topology_current().await });
        Ok(link)
    }

    /// The connection (cheap to clone: routes each command by its first key's slot), or why
    /// there is none yet.
    pub fn conn(&self) -> StoreResult<ClusterConnection> {
        lock(&self.conn).clone().map_err(FilterUnavailable::Error)
    }

    /// Connects if no connection was ever made (the cluster was down at start).
    async fn connect_if_never_connected(&self) {
        if lock(&self.conn).is_ok() {
            return;
        }
        let conn = open(&self.client, self.connect_timeout).await;
        if conn.is_ok() {
            tracing::info!("connected to the Redis Cluster");
        }
        let mut held = lock(&self.conn);
        if held.is_err() {
            *held = conn;
        }
    }

    /// Reports how a call went; after `FAILURES_BEFORE_RECONNECT` failures in a row the
    /// connection is replaced in the background (at most every `RECONNECT_BACKOFF`).
    pub fn report(&self, outcome: CallOutcome) {
        if outcome == CallOutcome::Answered {
            self.failures.store(0, Ordering::Relaxed);
            return;
        }
        if self.failures.fetch_add(1, Ordering::Relaxed) + 1 < FAILURES_BEFORE_RECONNECT
            || self.replacing.swap(true, Ordering::AcqRel)
        {
            return;
        }
        let link = self.clone();
        tokio::spawn(async move {
            match open(&link.client, link.connect_timeout).await {
                Ok(conn) => {
                    *lock(&link.conn) = Ok(conn);
                    link.failures.store(0, Ordering::Relaxed);
                    tracing::warn!("Redis Cluster calls kept failing; connected afresh");
                    link.refresh_soon();
                }
                Err(err) => tracing::warn!(cause = %err, "Redis Cluster calls keep failing; reconnecting failed"),
            }
            tokio::time::sleep(RECONNECT_BACKOFF).await;
            link.replacing.store(false, Ordering::Release);
        });
    }

    /// The topology last read, if any has been.
    pub fn topology(&self) -> StoreResult<Arc<Topology>> {
        lock(&self.topology)
            .clone()
            .ok_or_else(|| FilterUnavailable::Error("the Redis Cluster's masters are not known yet".into()))
    }

    /// Reads the topology now (a generation about to be created must name the current masters).
    pub async fn refresh(&self) -> StoreResult<Arc<Topology>> {
        let mut conn = self.conn()?;
        let mut info = redis::cmd("INFO");
        info.arg("server").arg("replication");
        let route = RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, None));
        let reply = match tokio::time::timeout(self.connect_timeout * 2, conn.route_command(info, route)).await {
            Ok(reply) => {
                reply.map_err(|e| FilterUnavailable::Error(format!("reading the Redis Cluster's masters: {e}")))?
            }
            Err(_) => {
                self.report(CallOutcome::TimedOut);
                return Err(FilterUnavailable::Timeout);
            }
        };
        let topology = Arc::new(topology_of_reply(&reply).map_err(FilterUnavailable::Error)?);
        let previous = lock(&self.topology).replace(topology.clone());
        if previous.as_ref().is_some_and(|p| p.incarnation != topology.incarnation) {
            tracing::warn!(
                masters = topology.identities.len(),
                "the Redis Cluster's masters changed (failover, failback or restart): filters on the old ones are rebuilt"
            );
        }
        Ok(topology)
    }

    /// Asks for a topology read soon: a script found a process it did not expect.
    pub fn refresh_soon(&self) {
        self.refresh_now.notify_one();
    }

    async fn keep_topology_current(&self) {
        loop {
            let _ = tokio::time::timeout(TOPOLOGY_REFRESH, self.refresh_now.notified()).await;
            self.connect_if_never_connected().await;
            if let Err(err) = self.refresh().await {
                tracing::debug!(cause = %err, "Redis Cluster topology read failed; keeping the last one");
            }
        }
    }
}

/// A new connection, learning the slots from any node the client knows; bounded in time (a
/// node that accepts and never answers would otherwise hold it).
async fn open(client: &ClusterClient, connect_timeout: Duration) -> Result<ClusterConnection, String> {
    match tokio::time::timeout(connect_timeout * 4, client.get_async_connection()).await {
        Ok(Ok(conn)) => Ok(conn),
        Ok(Err(e)) => Err(format!("cannot connect to the Redis Cluster: {e}")),
        Err(_) => {
            Err(format!("cannot connect to the Redis Cluster: no node answered within {:?}", connect_timeout * 4))
        }
    }
}

/// The topology in the reply of `INFO` routed to all masters: a map of address → text.
fn topology_of_reply(reply: &Value) -> Result<Topology, String> {
    let Value::Map(by_node) = reply else { return Err(format!("unexpected INFO reply from the masters: {reply:?}")) };
    let mut texts = Vec::with_capacity(by_node.len());
    for (node, info) in by_node {
        let address: String = redis::from_redis_value_ref(node).map_err(|e| format!("a master's address: {e}"))?;
        let text: String = redis::from_redis_value_ref(info).map_err(|e| format!("INFO of master {address}: {e}"))?;
        texts.push((address, text));
    }
    Topology::from_infos(texts.iter().map(|(a, t)| (a.as_str(), t.as_str())))
}

/// The route of a command that must run on the master at `address` (`host:port`).
pub fn route_to(address: &str) -> StoreResult<RoutingInfo> {
    let bad = || FilterUnavailable::Error(format!("a Redis Cluster master's address {address:?} is not host:port"));
    let (host, port) = address.rsplit_once(':').ok_or_else(bad)?;
    let port = port.parse().map_err(|_| bad())?;
    Ok(RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress { host: host.to_owned(), port }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(run_id: &str, replid: &str) -> String {
        format!("# Server\r\nrun_id:{run_id}\r\n# Replication\r\nrole:master\r\nmaster_replid:{replid}\r\n")
    }

    fn topology(masters: &[(&str, String)]) -> Result<Topology, String> {
        Topology::from_infos(masters.iter().map(|(address, info)| (*address, info.as_str())))
    }

    #[test]
    fn the_fingerprint_names_the_set_of_masters_and_their_histories() {
        let (a, b, c) = ("a".repeat(40), "b".repeat(40), "c".repeat(40));
        let one = topology(&[("h:1", info(&a, "1a")), ("h:2", info(&b, "2b"))]).unwrap();
        let same = topology(&[("h:2", info(&b, "2b")), ("h:1", info(&a, "1a"))]).unwrap();
        assert_eq!(one.incarnation, same.incarnation, "order does not matter");
        assert_eq!(same.masters, ["h:1", "h:2"]);
        let promoted = topology(&[("h:1", info(&a, "1a")), ("h:3", info(&c, "3c"))]).unwrap();
        assert_ne!(one.incarnation, promoted.incarnation, "a replica promoted in b's place");
        let failed_back = topology(&[("h:1", info(&a, "1a")), ("h:2", info(&b, "9f"))]).unwrap();
        assert_ne!(one.incarnation, failed_back.incarnation, "b demoted, resynchronised and failed back");
        assert_eq!(one.identities, [format!("{a}:1a"), format!("{b}:2b")]);
    }

    #[test]
    fn a_master_without_run_id_or_no_master_is_an_error() {
        assert!(topology(&[("h:1", "# Server\r\nredis_version:7\r\n".into())]).is_err());
        assert!(topology(&[]).is_err());
    }

    #[test]
    fn masters_are_routed_to_by_address() {
        let route = route_to("127.0.0.1:7001").unwrap();
        let expected = SingleNodeRoutingInfo::ByAddress { host: "127.0.0.1".into(), port: 7001 };
        assert_eq!(route, RoutingInfo::SingleNode(expected));
        assert!(route_to("127.0.0.1").is_err());
    }
}
