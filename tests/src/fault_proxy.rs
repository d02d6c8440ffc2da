//! A TCP proxy in front of a real service that a test can slow down or cut, to produce real
//! timeouts and real connection failures.

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const PASS: u8 = 0;
const CUT: u8 = 1;
const CORRUPT: u8 = 2;

/// The proxy; dropped = stopped.
pub struct ChaosProxy {
    /// Address clients connect to.
    pub addr: String,
    mode: Arc<AtomicU8>,
    delay_ms: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl ChaosProxy {
    /// Listens on a free port, forwarding to `upstream`.
    pub async fn start(upstream: &str) -> ChaosProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let mode = Arc::new(AtomicU8::new(PASS));
        let delay_ms = Arc::new(AtomicU64::new(0));
        let upstream = upstream.to_owned();
        let (m, d) = (mode.clone(), delay_ms.clone());
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                if m.load(Ordering::SeqCst) == CUT {
                    continue; // dropped: connection reset
                }
                let Ok(server) = TcpStream::connect(&upstream).await else {
                    continue;
                };
                let (cr, cw) = client.into_split();
                let (sr, sw) = server.into_split();
                // One task per connection: when either side closes (a Redis restart, an
                // origin killed), both sockets are dropped, so the client notices at once
                // instead of writing into a half-open connection.
                let (m, d) = (m.clone(), d.clone());
                tokio::spawn(async move {
                    tokio::select! {
                        _ = pipe(cr, sw, m.clone(), d.clone()) => {}
                        _ = pipe(sr, cw, m, d) => {}
                    }
                });
            }
        });
        ChaosProxy { addr, mode, delay_ms, task }
    }

    /// Drops every connection, open and new, until [`heal`](Self::heal).
    pub fn cut(&self) {
        self.mode.store(CUT, Ordering::SeqCst);
    }

    /// Flips the last byte of every chunk larger than 1 KiB, in both directions: damages
    /// segment bodies in transit while small requests and answers pass intact.
    pub fn corrupt_large_chunks(&self) {
        self.mode.store(CORRUPT, Ordering::SeqCst);
    }

    /// Forwards normally again.
    pub fn heal(&self) {
        self.delay_ms.store(0, Ordering::SeqCst);
        self.mode.store(PASS, Ordering::SeqCst);
    }

    /// Delays every chunk of data by `delay`.
    pub fn slow(&self, delay: Duration) {
        self.delay_ms.store(delay.as_millis() as u64, Ordering::SeqCst);
    }
}

impl Drop for ChaosProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn pipe(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mode: Arc<AtomicU8>,
    delay_ms: Arc<AtomicU64>,
) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        // Wake up regularly so a cut also ends idle connections.
        let read = tokio::time::timeout(Duration::from_millis(50), from.read(&mut buf)).await;
        if mode.load(Ordering::SeqCst) == CUT {
            return;
        }
        let n = match read {
            Err(_) => continue,
            Ok(Ok(0)) | Ok(Err(_)) => return,
            Ok(Ok(n)) => n,
        };
        let delay = delay_ms.load(Ordering::SeqCst);
        if delay > 0 {
            tokio::time::sleep(Duration::from_millis(delay)).await;
        }
        if mode.load(Ordering::SeqCst) == CORRUPT && n > 1024 {
            buf[n - 1] ^= 0x5a;
        }
        if mode.load(Ordering::SeqCst) == CUT || to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}
