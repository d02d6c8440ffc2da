//! A TCP proxy between the edge and the origin that counts, by kind, the HTTP requests the edge
//! sends and the response bytes the origin sends back: what the edge costs the origin, and
//! what freshness costs in bandwidth (manifests, segments, journal chunks, forwarded lookups).
//!
//! It reads the HTTP/1.1 streams as they pass, without changing them: requests are split by
//! `Content-Length`; responses by `Content-Length`, `chunked` or connection close, paired with
//! their requests in order (HTTP/1.1 answers in order on a connection).

use serde::Serialize;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What a request to the origin is for, by its path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `GET …/keys/{key}`: a forwarded single lookup.
    Lookup,
    /// `POST …/lookups`: a forwarded batch.
    Batch,
    /// `GET …/manifest`.
    Manifest,
    /// `GET …/segments/…`.
    Segment,
    /// `GET …/journal/…`.
    Journal,
    /// Anything else.
    Other,
}

const KINDS: usize = 6;

impl Kind {
    /// The kind of a request line's method and path.
    pub fn of(method: &str, path: &str) -> Kind {
        let path = path.split('?').next().unwrap_or("");
        if path.contains("/segments/") {
            Kind::Segment
        } else if path.contains("/journal/") {
            Kind::Journal
        } else if path.ends_with("/manifest") {
            Kind::Manifest
        } else if method == "POST" && path.ends_with("/lookups") {
            Kind::Batch
        } else if path.contains("/keys/") {
            Kind::Lookup
        } else {
            Kind::Other
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// A count per [`Kind`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct PerKind {
    /// Forwarded single lookups.
    pub lookups: u64,
    /// Forwarded batches.
    pub batches: u64,
    /// Manifests forwarded.
    pub manifests: u64,
    /// Segments forwarded.
    pub segments: u64,
    /// Journal chunks.
    pub journals: u64,
    /// Anything else.
    pub other: u64,
}

impl PerKind {
    fn from_array(a: [u64; KINDS]) -> PerKind {
        let [lookups, batches, manifests, segments, journals, other] = a;
        PerKind { lookups, batches, manifests, segments, journals, other }
    }

    /// The count of one kind.
    pub fn get(&self, kind: Kind) -> u64 {
        match kind {
            Kind::Lookup => self.lookups,
            Kind::Batch => self.batches,
            Kind::Manifest => self.manifests,
            Kind::Segment => self.segments,
            Kind::Journal => self.journals,
            Kind::Other => self.other,
        }
    }

    /// All kinds together.
    pub fn total(&self) -> u64 {
        self.lookups + self.batches + self.manifests + self.segments + self.journals + self.other
    }

    /// What keeps the edge fresh: manifests, segments and journal chunks.
    pub fn freshness(&self) -> u64 {
        self.manifests + self.segments + self.journals
    }

    /// Forwarded lookups, single and batched.
    pub fn forwarded(&self) -> u64 {
        self.lookups + self.batches
    }

    fn since(&self, before: &PerKind) -> PerKind {
        PerKind {
            lookups: self.lookups - before.lookups,
            batches: self.batches - before.batches,
            manifests: self.manifests - before.manifests,
            segments: self.segments - before.segments,
            journals: self.journals - before.journals,
            other: self.other - before.other,
        }
    }
}

/// A snapshot of what passed through a [`CountingProxy`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct ProxyTally {
    /// Requests from the edge, by kind.
    pub requests: PerKind,
    /// Response body bytes from the origin (decoded from `chunked`), by the request's kind.
    pub body_bytes: PerKind,
    /// Response status lines and headers, all kinds together.
    pub response_head_bytes: u64,
}

impl ProxyTally {
    /// `self - before`.
    pub fn since(&self, before: &ProxyTally) -> ProxyTally {
        ProxyTally {
            requests: self.requests.since(&before.requests),
            body_bytes: self.body_bytes.since(&before.body_bytes),
            response_head_bytes: self.response_head_bytes - before.response_head_bytes,
        }
    }
}

/// The proxy's counters, shared by its connections.
#[derive(Debug, Default)]
pub struct ProxyCounts {
    requests: [AtomicU64; KINDS],
    body_bytes: [AtomicU64; KINDS],
    response_head_bytes: AtomicU64,
}

impl ProxyCounts {
    /// The counts now.
    pub fn tally(&self) -> ProxyTally {
        let load = |a: &[AtomicU64; KINDS]| PerKind::from_array(std::array::from_fn(|i| a[i].load(Relaxed)));
        ProxyTally {
            requests: load(&self.requests),
            body_bytes: load(&self.body_bytes),
            response_head_bytes: self.response_head_bytes.load(Relaxed),
        }
    }
}

/// A request whose response has not been read yet.
#[derive(Clone, Copy, Debug)]
struct Pending {
    kind: Kind,
    /// A HEAD's response has no body, whatever its headers say.
    head: bool,
}

/// The requests of one connection awaiting their responses, oldest first.
type Queue = Arc<Mutex<VecDeque<Pending>>>;

/// Splits an HTTP/1.1 request stream into requests (head, then `Content-Length` bytes of
/// body), counts them and queues them for their responses. Chunked request bodies are not
/// expected from the edge.
#[derive(Default)]
struct RequestSplitter {
    buf: Vec<u8>,
    skip: usize,
}

impl RequestSplitter {
    fn feed(&mut self, data: &[u8], counts: &ProxyCounts, queue: &Queue) {
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
            let line = head.split(|b| *b == b'\r').next().unwrap_or_default();
            let line = String::from_utf8_lossy(line);
            let mut parts = line.split(' ');
            let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
            let kind = Kind::of(method, path);
            counts.requests[kind.index()].fetch_add(1, Relaxed);
            queue.lock().unwrap_or_else(|e| e.into_inner()).push_back(Pending { kind, head: method == "HEAD" });
            self.skip = header(head, "content-length").and_then(|v| v.parse().ok()).unwrap_or(0);
            self.buf.drain(..end + 4);
        }
    }
}

/// The value of the first header `name` (lowercase) in a message head.
fn header(head: &[u8], name: &str) -> Option<String> {
    String::from_utf8_lossy(head).lines().skip(1).find_map(|l| {
        let (n, value) = l.split_once(':')?;
        n.trim().eq_ignore_ascii_case(name).then(|| value.trim().to_owned())
    })
}

/// Where a response stream is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum At {
    /// Reading a status line and headers.
    Head,
    /// This many body bytes to go.
    Body(u64),
    /// The body runs until the connection closes (no length, not chunked).
    UntilClose,
    /// Reading a chunk-size line.
    ChunkSize,
    /// This many bytes of chunk data to go.
    ChunkData(u64),
    /// This many bytes of the CRLF after chunk data to go.
    ChunkEnd(u8),
    /// Reading trailer lines, until an empty one.
    Trailer,
}

/// Splits an HTTP/1.1 response stream into responses and counts their head and body bytes
/// under the kind of the request each answers.
struct ResponseSplitter {
    at: At,
    /// The line or head being read.
    line: Vec<u8>,
    kind: Kind,
}

impl Default for ResponseSplitter {
    fn default() -> Self {
        ResponseSplitter { at: At::Head, line: Vec::new(), kind: Kind::Other }
    }
}

impl ResponseSplitter {
    fn feed(&mut self, mut data: &[u8], counts: &ProxyCounts, queue: &Queue) {
        while !data.is_empty() {
            match self.at {
                At::Body(left) | At::ChunkData(left) => {
                    let n = (data.len() as u64).min(left);
                    counts.body_bytes[self.kind.index()].fetch_add(n, Relaxed);
                    data = &data[n as usize..];
                    self.at = match (self.at, left - n) {
                        (At::Body(_), 0) => At::Head,
                        (At::Body(_), rest) => At::Body(rest),
                        (_, 0) => At::ChunkEnd(2),
                        (_, rest) => At::ChunkData(rest),
                    };
                }
                At::UntilClose => {
                    counts.body_bytes[self.kind.index()].fetch_add(data.len() as u64, Relaxed);
                    return;
                }
                At::ChunkEnd(left) => {
                    let n = data.len().min(usize::from(left));
                    data = &data[n..];
                    self.at = if n == usize::from(left) { At::ChunkSize } else { At::ChunkEnd(left - n as u8) };
                }
                At::Head | At::ChunkSize | At::Trailer => {
                    // Heads and lines are short: byte by byte until the terminator.
                    let end: &[u8] = if self.at == At::Head { b"\r\n\r\n" } else { b"\r\n" };
                    let mut taken = 0;
                    let mut complete = false;
                    for b in data {
                        self.line.push(*b);
                        taken += 1;
                        if self.line.ends_with(end) {
                            complete = true;
                            break;
                        }
                    }
                    data = &data[taken..];
                    if complete {
                        let line = std::mem::take(&mut self.line);
                        self.end_of_line(&line, counts, queue);
                    }
                }
            }
        }
    }

    fn end_of_line(&mut self, line: &[u8], counts: &ProxyCounts, queue: &Queue) {
        match self.at {
            At::Head => {
                counts.response_head_bytes.fetch_add(line.len() as u64, Relaxed);
                let status: u16 =
                    String::from_utf8_lossy(line).split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
                // An interim response (100 Continue) answers nothing yet.
                if (100..200).contains(&status) {
                    return;
                }
                let pending = queue.lock().unwrap_or_else(|e| e.into_inner()).pop_front();
                let pending = pending.unwrap_or(Pending { kind: Kind::Other, head: false });
                self.kind = pending.kind;
                let chunked =
                    header(line, "transfer-encoding").is_some_and(|v| v.to_ascii_lowercase().contains("chunked"));
                let length: Option<u64> = header(line, "content-length").and_then(|v| v.parse().ok());
                self.at = if pending.head || status == 204 || status == 304 {
                    At::Head
                } else if chunked {
                    At::ChunkSize
                } else {
                    match length {
                        Some(0) => At::Head,
                        Some(n) => At::Body(n),
                        None => At::UntilClose,
                    }
                };
            }
            At::ChunkSize => {
                let text = String::from_utf8_lossy(line);
                let size = text.trim().split(';').next().unwrap_or("").trim();
                match u64::from_str_radix(size, 16) {
                    Ok(0) => self.at = At::Trailer,
                    Ok(n) => self.at = At::ChunkData(n),
                    // Not HTTP as expected: count the rest as body rather than guess.
                    Err(_) => self.at = At::UntilClose,
                }
            }
            // The empty line after the trailers ends the response.
            At::Trailer if line == b"\r\n" => self.at = At::Head,
            _ => {}
        }
    }
}

/// A TCP proxy that counts the HTTP requests and response bytes passing through it.
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
                let (client_reads, client_writes) = client.into_split();
                let (server_reads, server_writes) = server.into_split();
                let queue = Queue::default();
                let (c1, q1) = (c.clone(), queue.clone());
                let mut requests = RequestSplitter::default();
                // Queued before it is sent, so its response always finds it.
                let requests = move |bytes: &[u8]| requests.feed(bytes, &c1, &q1);
                tokio::spawn(pump(client_reads, server_writes, 16 * 1024, requests));
                let c2 = c.clone();
                let mut responses = ResponseSplitter::default();
                let responses = move |bytes: &[u8]| responses.feed(bytes, &c2, &queue);
                tokio::spawn(pump(server_reads, client_writes, 64 * 1024, responses));
            }
        });
        Ok(CountingProxy { addr, counts, task })
    }
}

/// Copies `from` to `to` until either side closes, showing each read to `look` before it is
/// passed on.
async fn pump(
    mut from: impl AsyncRead + Unpin,
    mut to: impl AsyncWrite + Unpin,
    buffer_bytes: usize,
    mut look: impl FnMut(&[u8]),
) {
    let mut buf = vec![0u8; buffer_bytes];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        look(&buf[..n]);
        if to.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
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
        let queue = Queue::default();
        let mut s = RequestSplitter::default();
        let stream = b"GET /v1/filters/f/manifest HTTP/1.1\r\nhost: x\r\n\r\n\
GET /v1/filters/f/segments/1/2?v=3 HTTP/1.1\r\n\r\n\
POST /v1/filters/f/lookups HTTP/1.1\r\nContent-Length: 22\r\n\r\nGET /keys/x HTTP/1.1\r\n\
GET /v1/filters/f/keys/ab HTTP/1.1\r\n\r\n\
GET /v1/filters/f/journal/1?after=3&after_id=5-0 HTTP/1.1\r\n\r\n";
        for chunk in stream.chunks(7) {
            s.feed(chunk, &counts, &queue);
        }
        let t = counts.tally().requests;
        assert_eq!((t.manifests, t.segments, t.batches, t.lookups, t.journals, t.other), (1, 1, 1, 1, 1, 0));
        let kinds: Vec<Kind> = queue.lock().unwrap().iter().map(|p| p.kind).collect();
        assert_eq!(kinds, [Kind::Manifest, Kind::Segment, Kind::Batch, Kind::Lookup, Kind::Journal]);
    }

    #[test]
    fn counts_response_bodies_by_the_kind_of_their_request() {
        let responses: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello\
HTTP/1.1 100 Continue\r\n\r\n\
HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n4\r\nabcd\r\na;x=y\r\n0123456789\r\n0\r\nT: v\r\n\r\n\
HTTP/1.1 304 Not Modified\r\netag: \"x\"\r\n\r\n\
HTTP/1.1 200 OK\r\ncontent-length: 7\r\n\r\n\
HTTP/1.1 404 Not Found\r\nContent-Length: 3\r\n\r\nnoo\
HTTP/1.1 200 OK\r\n\r\nuntil close";
        let pending = [
            (Kind::Manifest, false),
            (Kind::Segment, false),
            (Kind::Segment, false),
            (Kind::Lookup, true),
            (Kind::Lookup, false),
            (Kind::Journal, false),
        ];
        let head_bytes: u64 = [38, 25, 47, 40, 38, 45, 19].iter().sum();
        // Every way of cutting the stream into reads gives the same counts.
        for size in [1, 2, 3, 7, 64, responses.len()] {
            let counts = ProxyCounts::default();
            let queue = Queue::default();
            for (kind, head) in pending {
                queue.lock().unwrap().push_back(Pending { kind, head });
            }
            let mut s = ResponseSplitter::default();
            for chunk in responses.chunks(size) {
                s.feed(chunk, &counts, &queue);
            }
            let t = counts.tally();
            let b = t.body_bytes;
            assert_eq!(
                (b.manifests, b.segments, b.lookups, b.journals),
                (5, 14, 3, 11),
                "reads of {size} bytes: {b:?}"
            );
            assert_eq!(t.response_head_bytes, head_bytes, "reads of {size} bytes");
            assert_eq!(s.at, At::UntilClose);
        }
    }
}
