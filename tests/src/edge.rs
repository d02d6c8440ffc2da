//! `wrangler dev` running the built edge worker (edge/build, from `scripts/edge-build`) on a
//! free port, pointed at a given origin.
//!
//! wrangler's DevTools bridge is left unattached: under `wrangler dev` its inspector proxy
//! keeps every message the worker's inspector sends (console lines, and a `Network.*` event
//! for each subrequest with the whole response body, base64) until a DevTools client connects,
//! which never happens here; after about 18 minutes of chaos load that buffer took workerd's
//! heap past 1.1 GB and workerd aborted (BENCHMARKS.md, "Edge memory under sustained load").
//! `VSCODE_INSPECTOR_OPTIONS` is how wrangler (4.86 to 4.164 at least) recognises VS Code's
//! JavaScript debug terminal, where it does not attach its bridge (`wrangler dev` has no flag for
//! that); console output still reaches the log (workerd prints it). Set
//! `BG_TEST_WRANGLER_INSPECTOR=1` to attach it as `wrangler dev` does.
//!
//! wrangler runs through `scripts/wrangler`, as every script runs it: the repository's pinned
//! wrangler on the pinned Node, whatever Node the machine has (a checkout without that script,
//! named by `BG_TEST_EDGE_ROOT`, runs its own `node_modules/.bin/wrangler`).

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How to start `wrangler dev`.
#[derive(Clone, Debug)]
pub struct Options {
    /// `FRESHNESS_SECS`.
    pub freshness_secs: u32,
    /// More `--var NAME:value` (e.g. `LOG_REQUESTS`).
    pub vars: Vec<(String, String)>,
    /// The checkout whose `wrangler.toml`, `edge/build` and `node_modules` run: this one, or
    /// `BG_TEST_EDGE_ROOT` (to measure another build of the edge with the same harness).
    pub root: std::path::PathBuf,
    /// Attach wrangler's DevTools bridge, as plain `wrangler dev` does (see the module doc):
    /// `BG_TEST_WRANGLER_INSPECTOR=1`.
    pub wrangler_inspector: bool,
    /// Another build of the worker to serve than `wrangler.toml`'s (`edge/build`): a directory
    /// holding its `index.js`, relative to `root` (e.g. `edge/build-planted`).
    pub build: Option<std::path::PathBuf>,
    /// Where the local simulators keep their state (`--persist-to`; the Cache API's entries
    /// among it); `None` = wrangler's default, `.wrangler/state` in the checkout.
    pub persist_to: Option<std::path::PathBuf>,
}

impl Options {
    /// The defaults, with the freshness bound S.
    pub fn new(freshness_secs: u32) -> Options {
        let root = std::env::var_os("BG_TEST_EDGE_ROOT").map_or_else(crate::repo_root, Into::into);
        let wrangler_inspector = std::env::var("BG_TEST_WRANGLER_INSPECTOR").is_ok_and(|v| v == "1");
        Options { freshness_secs, vars: Vec::new(), root, wrangler_inspector, build: None, persist_to: None }
    }
}

/// An origin on the test services, a fault-injecting proxy in front of it, and an edge with
/// freshness bound S whose origin is the proxy: what the edge tests start. Keep the proxy bound
/// for as long as the edge is used (`proxy: _proxy`, not `..`, which drops it at once and leaves
/// the edge with no origin).
pub struct EdgeStack {
    /// The origin.
    pub origin: crate::origin::TestOrigin,
    /// Between the edge and the origin.
    pub proxy: crate::fault_proxy::ChaosProxy,
    /// The edge.
    pub edge: Wrangler,
}

/// Starts an [`EdgeStack`] with `tune` applied to the origin's config.
pub async fn edge_stack(freshness_secs: u32, tune: impl FnOnce(&mut bloomgate_origin::config::Config)) -> EdgeStack {
    let origin = crate::origin::TestOrigin::on_services(tune).await;
    let proxy = crate::fault_proxy::ChaosProxy::start(origin.base.trim_start_matches("http://")).await;
    let edge = Wrangler::start(&format!("http://{}", proxy.addr), crate::origin::EDGE_SECRET, freshness_secs).await;
    EdgeStack { origin, proxy, edge }
}

/// A running `wrangler dev`; dropped = stopped (SIGINT, then SIGKILL).
pub struct Wrangler {
    /// `http://127.0.0.1:port`.
    pub base: String,
    /// Its stdout and stderr.
    pub log: std::path::PathBuf,
    child: Child,
}

/// How the checkout at `root` runs wrangler: `scripts/wrangler` (pinned Node and wrangler,
/// installed on first use; it `exec`s wrangler, so the child's pid is wrangler's), or an older
/// checkout's `node_modules/.bin/wrangler` on the machine's Node.
fn wrangler_command(root: &std::path::Path) -> std::path::PathBuf {
    let script = root.join("scripts/wrangler");
    if script.exists() {
        return script;
    }
    let installed = root.join("node_modules/.bin/wrangler");
    assert!(installed.exists(), "wrangler is not installed in {}: run `scripts/edge-build`", root.display());
    installed
}

impl Wrangler {
    /// The `wrangler dev` process the harness started (its `workerd`s are descendants).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The port it serves on.
    pub fn port(&self) -> u16 {
        self.base.rsplit(':').next().and_then(|p| p.parse().ok()).unwrap_or(0)
    }

    /// Starts `wrangler dev` with the given vars and waits until `/healthz` answers.
    pub async fn start(origin_url: &str, edge_secret: &str, freshness_secs: u32) -> Wrangler {
        Wrangler::start_with(origin_url, edge_secret, Options::new(freshness_secs)).await
    }

    /// [`start`](Self::start) with more options.
    pub async fn start_with(origin_url: &str, edge_secret: &str, options: Options) -> Wrangler {
        let root = options.root.clone();
        let build = options.build.clone().unwrap_or_else(|| "edge/build".into());
        assert!(
            root.join(build.join("index.js")).exists(),
            "the edge is not built in {}: run `scripts/edge-build`",
            build.display()
        );
        // A free port is free only when asked: tests starting servers side by side (and
        // workerd's own ports) can take it before wrangler binds it. Such a start is retried
        // on another port; any other early exit fails at once with wrangler's words.
        for attempt in 1..=PORT_ATTEMPTS {
            let mut w = Wrangler::spawn(origin_url, edge_secret, &options, &build);
            match w.wait_healthy(Duration::from_secs(90)).await {
                Ok(()) => return w,
                Err(Start::PortTaken) if attempt < PORT_ATTEMPTS => continue,
                Err(Start::PortTaken) => panic!("wrangler dev found its port taken {PORT_ATTEMPTS} times"),
                Err(Start::Exited(tail)) => panic!("wrangler dev exited before answering /healthz:\n{tail}"),
                Err(Start::Silent) => {
                    panic!("wrangler dev did not answer /healthz within 90 s (log: {})", w.log.display())
                }
            }
        }
        unreachable!("every attempt returns or panics")
    }

    /// Starts `wrangler dev` on a port free at the time of asking.
    fn spawn(origin_url: &str, edge_secret: &str, options: &Options, build: &std::path::Path) -> Wrangler {
        let root = &options.root;
        let entry = build.join("index.js");
        let port = crate::free_port().unwrap();
        let log_path = std::env::temp_dir().join(format!("bloomgate-wrangler-{port}.log"));
        let log = std::fs::File::create(&log_path).unwrap();
        let mut command = Command::new(wrangler_command(root));
        command
            .current_dir(root)
            .arg("dev")
            // Another build's entry instead of wrangler.toml's `main`.
            .args(options.build.as_ref().map(|_| &entry))
            .args(["--ip", "127.0.0.1", "--port", &port.to_string(), "--show-interactive-dev-session=false"])
            .args(["--inspector-port", "0"])
            // Warnings and the Worker's errors only, not wrangler's line per request (its Node
            // process spent ~45 % of a core on them at ~60 requests/s in a chaos run).
            .args(["--log-level", "warn"])
            .args(["--var", &format!("ORIGIN_URL:{origin_url}")])
            .args(["--var", &format!("EDGE_SECRET:{edge_secret}")])
            .args(["--var", &format!("FRESHNESS_SECS:{}", options.freshness_secs)]);
        for (name, value) in &options.vars {
            command.args(["--var", &format!("{name}:{value}")]);
        }
        if let Some(dir) = &options.persist_to {
            command.arg("--persist-to").arg(dir);
        }
        if !options.wrangler_inspector {
            command.env("VSCODE_INSPECTOR_OPTIONS", "1");
        }
        let child = command
            .env("CI", "true")
            .env("WRANGLER_SEND_METRICS", "false")
            .env("CLOUDFLARE_CF_FETCH_ENABLED", "false")
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start wrangler dev");
        Wrangler { base: format!("http://127.0.0.1:{port}"), log: log_path, child }
    }

    /// Waits until `/healthz` answers, watching the process: an exit ends the wait at once.
    async fn wait_healthy(&mut self, within: Duration) -> Result<(), Start> {
        let healthz = format!("{}/healthz", self.base);
        let http = reqwest::Client::new();
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                let log = std::fs::read_to_string(&self.log).unwrap_or_default();
                return Err(start_failure(&log));
            }
            if http.get(&healthz).send().await.is_ok_and(|r| r.status().is_success()) {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        Err(Start::Silent)
    }
}

/// Starts of `wrangler dev` tried before giving up on finding a free port.
const PORT_ATTEMPTS: usize = 5;

/// Why `wrangler dev` did not come up.
#[derive(Debug, PartialEq)]
enum Start {
    /// Another process took the port between asking and binding.
    PortTaken,
    /// It exited for another reason: the end of its log.
    Exited(String),
    /// Still running, but never answered.
    Silent,
}

/// What an exited `wrangler dev`'s `log` says went wrong.
fn start_failure(log: &str) -> Start {
    if log.contains("Address already in use") {
        return Start::PortTaken;
    }
    let tail: Vec<&str> = log.lines().rev().take(20).collect();
    Start::Exited(tail.into_iter().rev().collect::<Vec<_>>().join("\n"))
}

impl Drop for Wrangler {
    fn drop(&mut self) {
        crate::procs::stop(&mut self.child, "INT", Duration::from_secs(5));
    }
}

/// The report of the edge isolate serving `base` on itself (`GET /_bloomgate/isolate`, with the
/// test origins' edge secret): its wasm memory, what it holds, counts and CPU.
pub async fn isolate_report(
    http: &reqwest::Client,
    base: &str,
) -> anyhow::Result<bloomgate_client::api::IsolateReport> {
    let url = format!("{base}{}", bloomgate_client::paths::ISOLATE);
    let r = http.get(&url).header(bloomgate_client::headers::EDGE_SECRET, crate::origin::EDGE_SECRET).send().await?;
    anyhow::ensure!(r.status().is_success(), "{url}: {}", r.status());
    Ok(r.json().await?)
}

/// Batch lookups at the edge at `base`, 500 keys a request: (seen, answered_by) per key. A 503
/// (the origin did not answer a forwarded batch in time: a loaded machine, not a "no") is asked
/// again for up to 10 s, so that tests check answers, not the machine's speed.
pub async fn batch(http: &reqwest::Client, base: &str, filter: &str, keys: &[String]) -> Vec<(bool, String)> {
    let mut out = Vec::new();
    for chunk in keys.chunks(500) {
        let deadline = Instant::now() + Duration::from_secs(10);
        let r = loop {
            let r = http
                .post(format!("{base}/v1/filters/{filter}/lookups"))
                .json(&serde_json::json!({ "keys": chunk }))
                .send()
                .await
                .unwrap();
            if r.status() != reqwest::StatusCode::SERVICE_UNAVAILABLE || Instant::now() >= deadline {
                break r;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        assert_eq!(r.status(), reqwest::StatusCode::OK, "edge batch");
        let body: serde_json::Value = r.json().await.unwrap();
        for v in body["results"].as_array().unwrap() {
            out.push((v["seen"].as_bool().unwrap(), v["answered_by"].as_str().unwrap_or("").to_owned()));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{start_failure, Start};

    #[test]
    fn a_taken_port_is_told_apart_from_other_exits() {
        let taken = "✘ [ERROR] Address already in use (127.0.0.1:45077). Please check that you are not already running a server on this address";
        assert_eq!(start_failure(taken), Start::PortTaken);
        match start_failure("line 1\n✘ [ERROR] wrangler.toml: unknown field") {
            Start::Exited(tail) => assert!(tail.ends_with("unknown field"), "{tail}"),
            other => panic!("{other:?}"),
        }
    }
}
