//! What the harness starts: origins (the real `bloomgate-origin` binary as a child process, or
//! in this process on a runtime of its own) and the axum hello-world floor. The proxy that
//! counts what the edge asks of the origin is in [`crate::counting_proxy`].

use anyhow::Context as _;
use axum::http::{HeaderValue, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use bloomgate_origin::config::Config;
use bloomgate_tests::origin::{EDGE_SECRET, SINGLE_NODE_REPLICATION, TOKEN};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tokio::net::TcpListener;

/// How to run a server the harness needs.
#[derive(Clone, Debug)]
pub enum Launch {
    /// A child process from this executable (`bloomgate-origin serve`, or the loadgen's own
    /// `floor` subcommand): its own runtime, as deployed.
    Process(PathBuf),
    /// A thread of this process with its own multi-threaded runtime (tests; no binary needed).
    Thread,
    /// A child process placed in a cgroup (its `cgroup.procs` file) before it execs, so all it
    /// ever allocates counts against that cgroup's limit.
    Confined {
        /// The binary.
        bin: PathBuf,
        /// The cgroup's `cgroup.procs`.
        cgroup_procs: PathBuf,
    },
}

/// Where an origin keeps its filter and keys.
#[derive(Clone, Debug)]
pub struct OriginSettings {
    /// `redis://host:port/`.
    pub redis_url: String,
    /// A Redis Cluster's nodes (`redis://host:port`) to use instead of `redis_url`.
    pub redis_cluster_nodes: Vec<String>,
    /// Cassandra `host:port`.
    pub cassandra: String,
    /// Keyspace (created if missing).
    pub keyspace: String,
    /// `false` = the A/B baseline: every lookup reads Cassandra.
    pub filter_enabled: bool,
    /// `false` = no insert journal: edges refetch changed segments whole (the writes A/B's other side).
    pub journal_enabled: bool,
    /// Further settings, as `BLOOMGATE_*` environment variables (an A/B's other knobs).
    pub extra_env: Vec<(String, String)>,
}

/// A server started by the harness; dropped = stopped.
pub struct Server {
    /// `http://127.0.0.1:port`.
    pub base: String,
    /// Process id serving it (this process for [`Launch::Thread`]).
    pub pid: u32,
    child: Option<Child>,
    /// Where the child's output goes.
    log: Option<PathBuf>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            bloomgate_tests::procs::stop(&mut child, "TERM", Duration::from_secs(5));
        }
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// How long a server may take to answer `/readyz` (an origin connects to Redis and Cassandra).
const READY_WITHIN: Duration = Duration::from_secs(60);

impl Server {
    /// A server that is the child process `child`, on `port`, its output in `log` if any.
    fn child(port: u16, child: Child, log: Option<PathBuf>) -> Server {
        Server {
            base: format!("http://127.0.0.1:{port}"),
            pid: child.id(),
            child: Some(child),
            log,
            shutdown: None,
            thread: None,
        }
    }

    /// Polls `/readyz` until it answers 200. A child process that exits first (a setting it
    /// refuses, a memory limit it cannot start under) fails this at once, with its log, rather
    /// than after the whole wait.
    async fn wait_ready(&mut self, what: &str) -> anyhow::Result<()> {
        let url = format!("{}/readyz", self.base);
        let http = reqwest::Client::builder().timeout(Duration::from_secs(5)).build()?;
        let deadline = Instant::now() + READY_WITHIN;
        loop {
            if let Some(status) = self.child.as_mut().map(Child::try_wait).transpose()?.flatten() {
                // Reaped: nothing is left to stop, and its pid may be another process's soon.
                self.child = None;
                let log = self.log.as_ref().map(|p| format!("; its output: {}", p.display())).unwrap_or_default();
                anyhow::bail!("{what} exited ({status}) before it answered {url}{log}");
            }
            if http.get(&url).send().await.is_ok_and(|r| r.status().is_success()) {
                return Ok(());
            }
            anyhow::ensure!(Instant::now() < deadline, "{what} did not answer {url} within {READY_WITHIN:?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
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
        log: None,
        shutdown: Some(tx),
        thread: Some(thread),
    })
}

/// CPUs this machine has (2 when it cannot tell).
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get())
}

/// Starts an origin and waits until `/readyz` answers.
pub async fn start_origin(launch: &Launch, settings: &OriginSettings) -> anyhow::Result<Server> {
    let port = bloomgate_tests::free_port()?;
    let mut server = match launch {
        Launch::Process(bin) => {
            let (child, log) = spawn_origin(Command::new(bin), bin, port, settings)?;
            Server::child(port, child, Some(log))
        }
        Launch::Confined { bin, cgroup_procs } => {
            // `sh` writes its own pid into the cgroup, then becomes the origin.
            let mut command = Command::new("sh");
            command.args(["-c", r#"echo $$ > "$0" && exec "$@""#]).arg(cgroup_procs).arg(bin);
            let (child, log) = spawn_origin(command, bin, port, settings)?;
            Server::child(port, child, Some(log))
        }
        Launch::Thread => {
            let no_flags = serde_json::Map::new();
            let base = Config::load_from(None, settings.extra_env.iter().cloned(), &no_flags)?;
            let config = Config {
                listen: ([127, 0, 0, 1], port).into(),
                redis_url: Some(settings.redis_url.clone()),
                redis_cluster_nodes: settings.redis_cluster_nodes.clone(),
                cassandra_nodes: vec![settings.cassandra.clone()],
                cassandra_keyspace: settings.keyspace.clone(),
                cassandra_replication: SINGLE_NODE_REPLICATION.into(),
                writer_tokens: vec![TOKEN.into()],
                edge_secret: Some(EDGE_SECRET.into()),
                filter_enabled: settings.filter_enabled,
                journal_enabled: settings.journal_enabled,
                ..base
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
    server.wait_ready("the origin").await?;
    Ok(server)
}

/// Runs `command serve` (the origin binary `bin`, or a wrapper that execs it) with `settings`,
/// its output in a log in the temp dir; the child and that log's path.
fn spawn_origin(
    mut command: Command,
    bin: &std::path::Path,
    port: u16,
    settings: &OriginSettings,
) -> anyhow::Result<(Child, PathBuf)> {
    let log_path = std::env::temp_dir().join(format!("bloomgate-loadgen-origin-{port}.log"));
    let log = std::fs::File::create(&log_path)?;
    let child = command
        .arg("serve")
        .env("BLOOMGATE_LISTEN", format!("127.0.0.1:{port}"))
        .env("BLOOMGATE_REDIS_URL", &settings.redis_url)
        .env("BLOOMGATE_REDIS_CLUSTER_NODES", settings.redis_cluster_nodes.join(","))
        .env("BLOOMGATE_CASSANDRA_NODES", &settings.cassandra)
        .env("BLOOMGATE_CASSANDRA_KEYSPACE", &settings.keyspace)
        .env("BLOOMGATE_CASSANDRA_REPLICATION", SINGLE_NODE_REPLICATION)
        .env("BLOOMGATE_WRITER_TOKENS", TOKEN)
        .env("BLOOMGATE_EDGE_SECRET", EDGE_SECRET)
        .env("BLOOMGATE_FILTER_ENABLED", settings.filter_enabled.to_string())
        .env("BLOOMGATE_JOURNAL_ENABLED", settings.journal_enabled.to_string())
        .envs(settings.extra_env.iter().cloned())
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .with_context(|| format!("start {}", bin.display()))?;
    Ok((child, log_path))
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
    let port = bloomgate_tests::free_port()?;
    let mut server = match launch {
        Launch::Process(exe) => {
            let child = Command::new(exe)
                .args(["floor", "--listen", &format!("127.0.0.1:{port}")])
                .stdin(Stdio::null())
                .spawn()
                .with_context(|| format!("start {} floor", exe.display()))?;
            Server::child(port, child, None)
        }
        Launch::Thread => serve_on_thread(port, cores(), |listener, rx| async move {
            let _ = serve_floor(listener, async {
                let _ = rx.await;
            })
            .await;
        })?,
        Launch::Confined { .. } => anyhow::bail!("the floor runs unconfined: launch it as a process or a thread"),
    };
    server.wait_ready("the floor").await?;
    Ok(server)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_origin_that_exits_at_start_fails_at_once_with_its_log() {
        let settings = OriginSettings {
            redis_url: "redis://127.0.0.1:1/".into(),
            redis_cluster_nodes: Vec::new(),
            cassandra: "127.0.0.1:1".into(),
            keyspace: "none".into(),
            filter_enabled: true,
            journal_enabled: true,
            extra_env: Vec::new(),
        };
        let started = Instant::now();
        // `false serve` exits 1 at once, as an origin refusing its settings does.
        let Err(e) = start_origin(&Launch::Process("false".into()), &settings).await else {
            panic!("`false` answered /readyz");
        };
        let said = format!("{e:#}");
        assert!(said.contains("exited") && said.contains("bloomgate-loadgen-origin-"), "{said}");
        assert!(started.elapsed() < READY_WITHIN / 2, "waited {:?} for a process that had exited", started.elapsed());
    }
}
