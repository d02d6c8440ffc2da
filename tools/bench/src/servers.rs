//! What the harness starts: origins (the real `bloomgate-origin` binary as a child process, or
//! in this process on a runtime of its own) and the axum hello-world floor. The proxy that
//! counts what the edge asks of the origin is in [`crate::counting_proxy`].

use anyhow::Context as _;
use axum::http::{HeaderValue, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use bloomgate_origin::config::Config;
use bloomgate_tests::origin::{EDGE_SECRET, TOKEN};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;
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

/// Polls `url` until it answers 200.
async fn wait_ready(url: &str, what: &str) -> anyhow::Result<()> {
    let http = reqwest::Client::new();
    let ready = bloomgate_tests::wait_until_ok(&http, url, Duration::from_secs(60), Duration::from_millis(100)).await;
    anyhow::ensure!(ready, "{what} did not answer {url} within 60 s");
    Ok(())
}

impl Server {
    /// A server that is the child process `child`, on `port`.
    fn child(port: u16, child: Child) -> Server {
        Server {
            base: format!("http://127.0.0.1:{port}"),
            pid: child.id(),
            child: Some(child),
            shutdown: None,
            thread: None,
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
    let server = match launch {
        Launch::Process(bin) => Server::child(port, spawn_origin(Command::new(bin), bin, port, settings)?),
        Launch::Confined { bin, cgroup_procs } => {
            // `sh` writes its own pid into the cgroup, then becomes the origin.
            let mut command = Command::new("sh");
            command.args(["-c", r#"echo $$ > "$0" && exec "$@""#]).arg(cgroup_procs).arg(bin);
            Server::child(port, spawn_origin(command, bin, port, settings)?)
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
    wait_ready(&format!("{}/readyz", server.base), "the origin").await?;
    Ok(server)
}

/// Runs `command serve` (the origin binary `bin`, or a wrapper that execs it) with `settings`,
/// its output in a log in the temp dir.
fn spawn_origin(
    mut command: Command,
    bin: &std::path::Path,
    port: u16,
    settings: &OriginSettings,
) -> anyhow::Result<Child> {
    let log_path = std::env::temp_dir().join(format!("bloomgate-loadgen-origin-{port}.log"));
    let log = std::fs::File::create(&log_path)?;
    command
        .arg("serve")
        .env("BLOOMGATE_LISTEN", format!("127.0.0.1:{port}"))
        .env("BLOOMGATE_REDIS_URL", &settings.redis_url)
        .env("BLOOMGATE_REDIS_CLUSTER_NODES", settings.redis_cluster_nodes.join(","))
        .env("BLOOMGATE_CASSANDRA_NODES", &settings.cassandra)
        .env("BLOOMGATE_CASSANDRA_KEYSPACE", &settings.keyspace)
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
        .with_context(|| format!("start {}", bin.display()))
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
    let server = match launch {
        Launch::Process(exe) => {
            let child = Command::new(exe)
                .args(["floor", "--listen", &format!("127.0.0.1:{port}")])
                .stdin(Stdio::null())
                .spawn()
                .with_context(|| format!("start {} floor", exe.display()))?;
            Server::child(port, child)
        }
        Launch::Thread => serve_on_thread(port, cores(), |listener, rx| async move {
            let _ = serve_floor(listener, async {
                let _ = rx.await;
            })
            .await;
        })?,
        Launch::Confined { .. } => anyhow::bail!("the floor runs unconfined: launch it as a process or a thread"),
    };
    wait_ready(&format!("{}/readyz", server.base), "the floor").await?;
    Ok(server)
}
