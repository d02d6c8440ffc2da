//! How every call reaches Redis, written once for both ways of reaching it: a multiplexed
//! connection to a single Redis, or a cluster connection that routes each command by its first
//! key's slot. A call runs under its timeout, is refused before it is sent when the link does
//! not reach the incarnation it expects, and tells the link how it went (a broken connection is
//! replaced); a script also carries the incarnation guard's arguments on a cluster.

use super::cluster::{ClusterLink, REFUSED_CODE};
use super::link::{CallOutcome, Link, RedisLink};
use super::{Backend, RedisFilterStore};
use crate::store::{FilterUnavailable, StoreResult};
use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, FromRedisValue, Pipeline, RedisFuture, ScriptInvocation, Value};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

/// A connection to a single Redis or to a Redis Cluster. Cheap to clone.
#[derive(Clone)]
pub enum RedisConn {
    /// One Redis: every command goes to it.
    Single(MultiplexedConnection),
    /// A Redis Cluster: every command goes to the master of its first key's slot; a pipeline
    /// must stay within one slot.
    Cluster(ClusterConnection),
}

impl ConnectionLike for RedisConn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            RedisConn::Single(c) => c.req_packed_command(cmd),
            RedisConn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            RedisConn::Single(c) => c.req_packed_commands(pipeline, offset, count),
            RedisConn::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            RedisConn::Single(c) => c.get_db(),
            RedisConn::Cluster(c) => c.get_db(),
        }
    }
}

/// What carried a call, to be told how it went (a broken connection is replaced).
enum Carrier<'a> {
    /// The single Redis's link and the connection it lent.
    Single(&'a RedisLink, Arc<Link>),
    /// The cluster's link.
    Cluster(&'a ClusterLink),
}

impl RedisFilterStore {
    /// Runs one call under `limit`, over the current link, and reports to the link how it
    /// went. With `expect`, the call is refused (never sent) unless the link reaches the Redis
    /// incarnation `expect` names.
    pub(super) async fn call<T, F, Fut>(&self, limit: Duration, expect: Option<u64>, call: F) -> StoreResult<T>
    where
        F: FnOnce(RedisConn) -> Fut,
        Fut: Future<Output = redis::RedisResult<T>>,
    {
        self.call_at(limit, expect, call).await.map(|(value, _)| value)
    }

    /// [`call`](Self::call), also returning the incarnation the call reached. On a cluster the
    /// expectation is checked against the masters last read here, and again inside Redis by
    /// every script (a promoted replica refuses: see `cluster`).
    pub(super) async fn call_at<T, F, Fut>(
        &self,
        limit: Duration,
        expect: Option<u64>,
        call: F,
    ) -> StoreResult<(T, u64)>
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
                (RedisConn::Cluster(cluster.conn()?), cluster.topology()?.incarnation, Carrier::Cluster(cluster))
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
                match carrier {
                    Carrier::Cluster(cluster) => cluster.refresh_soon(),
                    // The same connection, another history (demoted, resynchronised): the next
                    // call connects afresh and learns the identity it has now.
                    Carrier::Single(link, reached) => link.report(&reached, CallOutcome::ConnectionFailed),
                }
                Err(FilterUnavailable::Incarnation)
            }
            Ok(Err(_)) if how == CallOutcome::TimedOut => Err(FilterUnavailable::Timeout),
            Ok(Err(err)) => Err(FilterUnavailable::Error(err.to_string())),
            Ok(Ok(value)) => Ok((value, incarnation)),
        }
    }

    /// Runs a script as [`call`](Self::call) does. With `expect`, its guard gets the
    /// identities of the processes the incarnation names (the single Redis the link reached, or
    /// the cluster's masters as last read), so the script itself refuses to run on any other
    /// process or history; without, any process.
    pub(super) async fn run<T: FromRedisValue>(
        &self,
        limit: Duration,
        expect: Option<u64>,
        mut invocation: ScriptInvocation<'_>,
    ) -> StoreResult<T> {
        let identities = match (expect, &self.backend) {
            (None, _) => Vec::new(),
            (Some(_), Backend::Single(link)) => {
                let reached =
                    tokio::time::timeout(limit, link.get()).await.map_err(|_| FilterUnavailable::Timeout)??;
                vec![reached.identity.clone()]
            }
            (Some(_), Backend::Cluster(cluster)) => cluster.topology()?.identities.clone(),
        };
        for identity in &identities {
            invocation.arg(identity);
        }
        invocation.arg(identities.len());
        let invocation = &invocation;
        self.call(limit, expect, |mut c| async move { invocation.invoke_async(&mut c).await }).await
    }
}
