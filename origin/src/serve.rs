//! The HTTP server loop: the router on hyper's HTTP/1 server, with the limits `axum::serve`
//! does not set. A client that opens connections and sends nothing, or sends its request head
//! a byte at a time, holds a connection for at most one and a half `header_read_timeout` (idle
//! keep-alive connections included; `connection_watchdog`, one timer per connection), and at most `max_connections` are open at once: the next ones wait
//! in the kernel's listen backlog. Neither takes room under an in-flight cap (`admission`).

use crate::connection_watchdog::{expired, Activity, Watched};
use axum::Router;
use hyper_util::rt::TokioIo;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

/// Connection-level limits.
#[derive(Clone, Copy, Debug)]
pub struct ServeLimits {
    /// Open connections at once.
    pub max_connections: usize,
    /// Time allowed for a complete request head, and for an idle connection's next request.
    pub header_read_timeout: Duration,
    /// How long shutdown waits for requests in flight.
    pub drain: Duration,
}

/// Pause after a failed accept (e.g. out of file descriptors) before accepting again.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(50);

/// Serves `app` on `listener` until `shutdown` resolves, then lets requests in flight finish
/// (for at most `limits.drain`).
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: ServeLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    let graceful = GracefulShutdown::new();
    let mut http = hyper::server::conn::http1::Builder::new();
    // The connection's watchdog keeps slow heads out, with no timer per request (see
    // `connection_watchdog`); hyper's own timeout needs a timer, and none is given.
    http.header_read_timeout(None);
    tokio::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            permit = permits.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => break,
            },
            () = &mut shutdown => break,
        };
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    tracing::warn!(cause = %e, "accept failed");
                    tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let activity = Arc::new(Activity::default());
        let service = Watched::new(TowerToHyperService::new(app.clone()), activity.clone());
        let connection = graceful.watch(http.serve_connection(TokioIo::new(stream), service));
        let timeout = limits.header_read_timeout;
        tokio::spawn(async move {
            // Dropping the connection closes it.
            tokio::select! {
                _ = connection => {}
                () = expired(&activity, timeout) => {}
            }
            drop(permit);
        });
    }
    drop(listener);
    if tokio::time::timeout(limits.drain, graceful.shutdown()).await.is_err() {
        tracing::warn!("shutdown: requests still in flight after the drain time; closing them");
    }
    Ok(())
}
