//! `wrangler dev` running the built edge worker (edge/build, from `scripts/edge-build`) on a
//! free port, pointed at a given origin.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running `wrangler dev`; dropped = stopped (SIGINT, then SIGKILL).
pub struct Wrangler {
    /// `http://127.0.0.1:port`.
    pub base: String,
    /// Its stdout and stderr.
    pub log: std::path::PathBuf,
    child: Child,
}

fn repo_root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
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
        let root = repo_root();
        let wrangler = root.join("node_modules/.bin/wrangler");
        assert!(wrangler.exists(), "wrangler is not installed: run `scripts/edge-build` (it runs npm ci)");
        assert!(root.join("edge/build/index.js").exists(), "the edge is not built: run `scripts/edge-build`");
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let log_path = std::env::temp_dir().join(format!("bloomgate-wrangler-{port}.log"));
        let log = std::fs::File::create(&log_path).unwrap();
        let child = Command::new(wrangler)
            .current_dir(&root)
            .args(["dev", "--ip", "127.0.0.1", "--port", &port.to_string(), "--show-interactive-dev-session=false"])
            .args(["--inspector-port", "0"])
            // Warnings and the Worker's errors only, not wrangler's line per request.
            .args(["--log-level", "warn"])
            .args(["--var", &format!("ORIGIN_URL:{origin_url}")])
            .args(["--var", &format!("EDGE_SECRET:{edge_secret}")])
            .args(["--var", &format!("FRESHNESS_SECS:{freshness_secs}")])
            .env("CI", "true")
            .env("WRANGLER_SEND_METRICS", "false")
            .env("CLOUDFLARE_CF_FETCH_ENABLED", "false")
            // No DevTools proxy: wrangler skips its inspector proxy in a VS Code debug terminal,
            // which this variable marks. With it, every console message and request event went
            // through wrangler's Node process (~45 % of a core at ~60 requests/s) and its proxy
            // `workerd` grew by ~150 MiB a minute until lookups queued for seconds (a 40-minute
            // chaos run; 24 KiB per request with it, 7 KiB without, over 9,000 lookups). The
            // Worker's console output still reaches the log, from `workerd` itself.
            .env("VSCODE_INSPECTOR_OPTIONS", "off")
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start wrangler dev");
        let base = format!("http://127.0.0.1:{port}");
        let w = Wrangler { base, log: log_path, child };
        let http = reqwest::Client::new();
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            if let Ok(r) = http.get(format!("{}/healthz", w.base)).send().await {
                if r.status().is_success() {
                    break;
                }
            }
            assert!(
                Instant::now() < deadline,
                "wrangler dev did not answer /healthz within 90 s (log in the temp dir)"
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        w
    }
}

impl Drop for Wrangler {
    fn drop(&mut self) {
        let pid = self.child.id().to_string();
        let _ = Command::new("kill").args(["-INT", &pid]).status();
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
