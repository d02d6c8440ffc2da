//! A private `redis-server` on a free port that a test may kill, restart or flush.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A Redis server owned by one test.
pub struct RedisServer {
    /// Its port on 127.0.0.1.
    pub port: u16,
    child: Option<Child>,
    dir: std::path::PathBuf,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

impl RedisServer {
    /// Starts one and waits until it answers.
    pub fn start() -> RedisServer {
        let dir = std::env::temp_dir().join(format!("bloomgate-redis-{:x}", rand::random::<u64>()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut server = RedisServer { port: free_port(), child: None, dir };
        server.restart();
        server
    }

    /// `redis://` URL.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// Address.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Writes a snapshot now (`SAVE`); the next [`restart`](Self::restart) loads it: Redis
    /// back in time, as after a restart from an RDB file or a failover to a lagging replica.
    pub async fn save_snapshot(&self) {
        let mut conn = self.connection().await;
        let _: () = redis::cmd("SAVE").query_async(&mut conn).await.expect("SAVE");
    }

    /// Deletes the snapshot, so the next restart starts empty.
    pub fn forget_snapshot(&self) {
        let _ = std::fs::remove_file(self.dir.join("dump.rdb"));
    }

    /// Starts the server again on the same port: empty, or from the last
    /// [`save_snapshot`](Self::save_snapshot) if there is one (no other persistence).
    pub fn restart(&mut self) {
        self.kill();
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(&self.dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server not found: run `scripts/services start redis` once to install it");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(self.addr()).is_err() {
            assert!(Instant::now() < deadline, "redis-server did not start on port {}", self.port);
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Kills the server (SIGKILL: no goodbye).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// A connection for inspecting or breaking the data.
    pub async fn connection(&self) -> redis::aio::MultiplexedConnection {
        redis::Client::open(self.url()).unwrap().get_multiplexed_async_connection().await.unwrap()
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
