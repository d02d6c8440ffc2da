//! What the harness starts: origins (the real `bloomgate-origin` binary as a child process, or
//! in this process on a runtime of its own), the axum hello-world floor, and a TCP proxy that
//! counts the HTTP requests the edge sends to the origin.

use crate::origin::{EDGE_SECRET, TOKEN};
use anyhow::Context as _;
use axum::http::{HeaderValue, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use bloomgate_origin::config::Config;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// How to run a server the harness needs.
#[derive(Clone, Debug)]
pub enum Launch {
    /// A child process from this executable (`bloomgate-origin serve`, or the loadgen's own
    /// `floor` subcommand): its own runtime, as deployed.
    Process(PathBuf),
    /// A thread of this process with its own multi-threaded runtime (tests; no binary needed).
    Thread,
}

/// Where an origin keeps its filter and keys.
#[derive(Clone, Debug)]
pub struct OriginSettings {
    /// `redis://host:port/`.
    pub redis_url: String,
    /// Cassandra `host:port`.
    pub cassandra: String,
    /// Keyspace (created if missing).
    pub keyspace: String,
    /// `false` = the A/B baseline: every lookup reads Cassandra.
    pub filter_enabled: bool,
}

/// A server started by the harness; dropped = stopped.
pub struct Server {
    /// `http://127.0.0.1:port`.
    pub base: String,
    /// Process id serving it (this process for [`Launch::Thread`]).
    pub pid: u32,
    child: Option<Child>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
            let deadline = Instant::now() + Duration::from_secs(5);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// Polls `url` until it answers 200.
async fn wait_ready(url: &str, what: &str) -> anyhow::Result<()> {
    let http = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(r) = http.get(url).send().await {
            if r.status().is_success() {
                return Ok(());
            }
        }
        anyhow::ensure!(Instant::now() < deadline, "{what} did not answer {url} within 60 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Serves `make_router()` on a thread with its own runtime of `workers` threads.
fn serve_on_thread<F, Fut>(port: u16, workers: usize, serve: F) -> anyhow::Result<Server>
where
    F: FnOnce(TcpListener, tokio::sync::oneshot::Receiver<()>) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()>,
{
    let listener = std::net::TcpListener::bind(("127.0.0.1", port))?;
    listener.set_nonblocking(true)?;
    let (tx, rx) = tokio::sync::oneshot::channel();
    let thread = std::thread::Builder::new().name(format!("server-{port}")).spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(workers)
            .enable_all()
            .build()
            .expect("server runtime");
        rt.block_on(async move {
            let listener = TcpListener::from_std(listener).expect("listener");
            serve(listener, rx).await;
        });
    })?;
    Ok(Server {
        base: format!("http://127.0.0.1:{port}"),
        pid: std::process::id(),
        child: None,
        shutdown: Some(tx),
        thread: Some(thread),
    })
}

fn cores() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get())
}

/// Starts an origin and waits until `/readyz` answers.
pub async fn start_origin(launch: &Launch, settings: &OriginSettings) -> anyhow::Result<Server> {
    let port = free_port()?;
    let server = match launch {
        Launch::Process(bin) => {
            let log_path = std::env::temp_dir().join(format!("bloomgate-loadgen-origin-{port}.log"));
            let log = std::fs::File::create(&log_path)?;
            let child = Command::new(bin)
                .arg("serve")
                .env("BLOOMGATE_LISTEN", format!("127.0.0.1:{port}"))
                .env("BLOOMGATE_REDIS_URL", &settings.redis_url)
                .env("BLOOMGATE_CASSANDRA_NODES", &settings.cassandra)
                .env("BLOOMGATE_CASSANDRA_KEYSPACE", &settings.keyspace)
                .env("BLOOMGATE_WRITER_TOKENS", TOKEN)
                .env("BLOOMGATE_EDGE_SECRET", EDGE_SECRET)
                .env("BLOOMGATE_FILTER_ENABLED", settings.filter_enabled.to_string())
                .env("RUST_LOG", "warn")
                .stdin(Stdio::null())
                .stdout(log.try_clone()?)
                .stderr(log)
                .spawn()
                .with_context(|| format!("start {}", bin.display()))?;
            Server {
                base: format!("http://127.0.0.1:{port}"),
                pid: child.id(),
                child: Some(child),
                shutdown: None,
                thread: None,
            }
        }
        Launch::Thread => {
            let config = Config {
                listen: ([127, 0, 0, 1], port).into(),
                redis_url: Some(settings.redis_url.clone()),
                cassandra_nodes: vec![settings.cassandra.clone()],
                cassandra_keyspace: settings.keyspace.clone(),
                writer_tokens: vec![TOKEN.into()],
                edge_secret: Some(EDGE_SECRET.into()),
                filter_enabled: settings.filter_enabled,
                ..Config::default()
            };
            // Build the state (connecting the stores) before handing the listener over, so
            // a bad address fails here and not in a detached thread.
            let (state_tx, state_rx) = std::sync::mpsc::channel();
            let server = serve_on_thread(port, cores(), move |listener, rx| async move {
                match bloomgate_origin::build_state(config).await {
                    Ok(state) => {
                        let _ = state_tx.send(Ok(()));
                        let _ = bloomgate_origin::run(listener, state, async {
                            let _ = rx.await;
                        })
                        .await;
                    }
                    Err(e) => {
                        let _ = state_tx.send(Err(e));
                    }
                }
            })?;
            tokio::task::spawn_blocking(move || state_rx.recv()).await?.context("origin thread died")??;
            server
        }
    };
    wait_ready(&format!("{}/readyz", server.base), "the origin").await?;
    Ok(server)
}

/// The floor: what axum alone costs for the same route, a 404 with a small JSON body and the
/// answered-by header, and no work at all behind it.
pub fn floor_router() -> Router {
    async fn not_seen() -> impl IntoResponse {
        (
            StatusCode::NOT_FOUND,
            [
                ("content-type", HeaderValue::from_static("application/json")),
                ("x-bloomgate-answered-by", HeaderValue::from_static("floor")),
            ],
            r#"{"seen":false}"#,
        )
    }
    Router::new().route("/v1/filters/{filter}/keys/{key}", get(not_seen)).route("/readyz", get(|| async { "ok" }))
}

/// Serves the floor on `listener` until `shutdown`.
pub async fn serve_floor(
    listener: TcpListener,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, floor_router()).with_graceful_shutdown(shutdown).await
}

/// Starts the floor: `Process(exe)` runs `exe floor --listen ADDR` (the loadgen itself).
pub async fn start_floor(launch: &Launch) -> anyhow::Result<Server> {
    let port = free_port()?;
    let server = match launch {
        Launch::Process(exe) => {
            let child = Command::new(exe)
                .args(["floor", "--listen", &format!("127.0.0.1:{port}")])
                .stdin(Stdio::null())
                .spawn()
                .with_context(|| format!("start {} floor", exe.display()))?;
            Server {
                base: format!("http://127.0.0.1:{port}"),
                pid: child.id(),
                child: Some(child),
                shutdown: None,
                thread: None,
            }
        }
        Launch::Thread => serve_on_thread(port, cores(), |listener, rx| async move {
            let _ = serve_floor(listener, async {
                let _ = rx.await;
            })
            .await;
        })?,
    };
    wait_ready(&format!("{}/readyz", server.base), "the floor").await?;
    Ok(server)
}

/// Requests seen by a [`CountingProxy`], by kind.
#[derive(Debug, Default)]
pub struct ProxyCounts {
    /// `GET …/keys/{key}` (forwarded single lookups).
    pub lookups: AtomicU64,
    /// `POST …/lookups` (forwarded batches).
    pub batches: AtomicU64,
    /// `GET …/manifest`.
    pub manifests: AtomicU64,
    /// `GET …/segments/…`.
    pub segments: AtomicU64,
    /// Anything else.
    pub other: AtomicU64,
}

/// A snapshot of [`ProxyCounts`].
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct ProxyTally {
    /// Forwarded single lookups.
    pub lookups: u64,
    /// Forwarded batches.
    pub batches: u64,
    /// Manifest fetches.
    pub manifests: u64,
    /// Segment fetches.
    pub segments: u64,
    /// Anything else.
    pub other: u64,
}

impl ProxyTally {
    /// All requests.
    pub fn total(&self) -> u64 {
        self.lookups + self.batches + self.manifests + self.segments + self.other
    }

    /// `self - before`.
    pub fn since(&self, before: &ProxyTally) -> ProxyTally {
        ProxyTally {
            lookups: self.lookups - before.lookups,
            batches: self.batches - before.batches,
            manifests: self.manifests - before.manifests,
            segments: self.segments - before.segments,
            other: self.other - before.other,
        }
    }
}

impl ProxyCounts {
    /// The counts now.
    pub fn tally(&self) -> ProxyTally {
        ProxyTally {
            lookups: self.lookups.load(Relaxed),
            batches: self.batches.load(Relaxed),
            manifests: self.manifests.load(Relaxed),
            segments: self.segments.load(Relaxed),
            other: self.other.load(Relaxed),
        }
    }

    fn count(&self, head: &[u8]) {
        let line = head.split(|b| *b == b'\r').next().unwrap_or_default();
        let line = String::from_utf8_lossy(line);
        let mut parts = line.split(' ');
        let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
        let path = path.split('?').next().unwrap_or("");
        let counter = if path.contains("/segments/") {
            &self.segments
        } else if path.ends_with("/manifest") {
            &self.manifests
        } else if method == "POST" && path.ends_with("/lookups") {
            &self.batches
        } else if path.contains("/keys/") {
            &self.lookups
        } else {
            &self.other
        };
        counter.fetch_add(1, Relaxed);
    }
}

/// Splits an HTTP/1.1 request stream into requests (head, then `Content-Length` bytes of
/// body) and counts them. Chunked request bodies are not expected from the edge.
#[derive(Default)]
struct RequestSplitter {
    buf: Vec<u8>,
    skip: usize,
}

impl RequestSplitter {
    fn feed(&mut self, data: &[u8], counts: &ProxyCounts) {
        self.buf.extend_from_slice(data);
        loop {
            if self.skip > 0 {
                let n = self.skip.min(self.buf.len());
                self.buf.drain(..n);
                self.skip -= n;
                if self.skip > 0 {
                    return;
                }
            }
            let Some(end) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") else {
                return;
            };
            let head = &self.buf[..end];
            counts.count(head);
            self.skip = content_length(head);
            self.buf.drain(..end + 4);
        }
    }
}

fn content_length(head: &[u8]) -> usize {
    String::from_utf8_lossy(head)
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.trim().eq_ignore_ascii_case("content-length").then(|| value.trim().parse().ok())?
        })
        .unwrap_or(0)
}

/// A TCP proxy that counts the HTTP requests passing through it.
pub struct CountingProxy {
    /// `host:port` to connect to.
    pub addr: String,
    /// What has passed so far.
    pub counts: Arc<ProxyCounts>,
    task: tokio::task::JoinHandle<()>,
}

impl CountingProxy {
    /// Listens on a free port, forwarding to `upstream` (`host:port`).
    pub async fn start(upstream: &str) -> anyhow::Result<CountingProxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?.to_string();
        let counts = Arc::new(ProxyCounts::default());
        let (c, upstream) = (counts.clone(), upstream.to_owned());
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(&upstream).await else {
                    continue;
                };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                let (mut cr, cw) = client.into_split();
                let (mut sr, mut sw) = server.into_split();
                let c = c.clone();
                tokio::spawn(async move {
                    let mut splitter = RequestSplitter::default();
                    let mut buf = vec![0u8; 16 * 1024];
                    loop {
                        let n = match cr.read(&mut buf).await {
                            Ok(0) | Err(_) => break,
                            Ok(n) => n,
                        };
                        splitter.feed(&buf[..n], &c);
                        if sw.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                    }
                    let _ = sw.shutdown().await;
                });
                tokio::spawn(async move {
                    let mut cw = cw;
                    let _ = tokio::io::copy(&mut sr, &mut cw).await;
                    let _ = cw.shutdown().await;
                });
            }
        });
        Ok(CountingProxy { addr, counts, task })
    }
}

impl Drop for CountingProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_requests_across_chunks_and_skips_bodies() {
        let counts = ProxyCounts::default();
        let mut s = RequestSplitter::default();
        let stream = b"GET /v1/filters/f/manifest HTTP/1.1\r\nhost: x\r\n\r\n\
GET /v1/filters/f/segments/1/2?v=3 HTTP/1.1\r\n\r\n\
POST /v1/filters/f/lookups HTTP/1.1\r\nContent-Length: 22\r\n\r\nGET /keys/x HTTP/1.1\r\n\
GET /v1/filters/f/keys/ab HTTP/1.1\r\n\r\n";
        for chunk in stream.chunks(7) {
            s.feed(chunk, &counts);
        }
        let t = counts.tally();
        assert_eq!((t.manifests, t.segments, t.batches, t.lookups, t.other), (1, 1, 1, 1, 0));
    }
}
