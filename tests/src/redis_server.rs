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

impl RedisServer {
    /// Starts one and waits until it answers.
    pub fn start() -> RedisServer {
        let dir = std::env::temp_dir().join(format!("bloomgate-redis-{:x}", rand::random::<u64>()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut server = RedisServer { port: crate::free_port().unwrap(), child: None, dir };
        server.restart();
        server
    }

    /// `redis://` URL.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// The server's `host:port` on loopback.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Starts the server again, empty, on the same port. (It persists nothing on its own;
    /// a snapshot written by `SAVE` is removed first.)
    pub fn restart(&mut self) {
        self.kill();
        let _ = std::fs::remove_file(self.dir.join("dump.rdb"));
        self.spawn();
    }

    /// Starts the server again on the same port from an RDB snapshot (as written by `SAVE`
    /// into [`snapshot_path`](Self::snapshot_path) and copied aside): Redis going back in time.
    pub fn restart_from(&mut self, snapshot: &std::path::Path) {
        self.kill();
        std::fs::copy(snapshot, self.snapshot_path()).expect("copy the Redis snapshot into place");
        self.spawn();
    }

    /// Where `SAVE` writes the snapshot, and where a start loads it from.
    pub fn snapshot_path(&self) -> std::path::PathBuf {
        self.dir.join("dump.rdb")
    }

    /// The server's process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    fn spawn(&mut self) {
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
        // Up and done loading a snapshot: PING answers PONG (not -LOADING).
        while !self.pong() {
            assert!(Instant::now() < deadline, "redis-server did not start on port {}", self.port);
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn pong(&self) -> bool {
        use std::io::{Read, Write};
        let Ok(mut stream) = std::net::TcpStream::connect(self.addr()) else { return false };
        let _ = stream.set_read_timeout(Some(Duration::from_secs(1)));
        let mut answer = [0u8; 5];
        stream.write_all(b"PING\r\n").is_ok() && stream.read_exact(&mut answer).is_ok() && &answer == b"+PONG"
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
