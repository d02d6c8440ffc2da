//! HTTP/1.1 requests written byte for byte over a plain TCP connection, for tests of odd paths:
//! an HTTP client parses and normalises the URL first (`%2e` segments removed, `\` turned into
//! `/`), which would hide exactly what those tests send.

use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A response as read off the wire.
#[derive(Debug, Clone)]
pub struct RawResponse {
    /// Status code.
    pub status: u16,
    /// Header names (lowercase) and values, in order.
    pub headers: Vec<(String, String)>,
    /// The body, de-chunked; empty for HEAD.
    pub body: String,
}

impl RawResponse {
    /// The first value of a header (name in lowercase).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }
}

/// Sends `{method} {target} HTTP/1.1` to `base` (`http://host:port`) with the target exactly as
/// given, and reads the whole response (the connection is closed after it).
pub async fn request(base: &str, method: &str, target: &str) -> RawResponse {
    let host = base.trim_start_matches("http://").trim_end_matches('/');
    let exchange = async {
        let mut stream = TcpStream::connect(host).await?;
        let head = format!("{method} {target} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
        stream.write_all(head.as_bytes()).await?;
        read_response(&mut stream, Vec::new(), method == "HEAD").await
    };
    let raw = tokio::time::timeout(Duration::from_secs(60), exchange)
        .await
        .unwrap_or_else(|_| panic!("{method} {target} at {base}: no answer within 60 s"))
        .unwrap_or_else(|e| panic!("{method} {target} at {base}: {e}"));
    parse(&raw).unwrap_or_else(|| panic!("{method} {target} at {base}: unparsable answer {raw:?}"))
}

/// POSTs `body` to `target` at `base` with `Transfer-Encoding: chunked` (no `Content-Length`),
/// in chunks of `chunk` bytes, and reads the response. The server may answer before it has
/// read the whole body: the body is written alongside the read, and a write the server no
/// longer takes ends the writing, not the exchange. A server that closes the connection with
/// part of the body unread resets it, and its answer may be lost with it: `Err` then says so.
pub async fn post_chunked(base: &str, target: &str, body: Vec<u8>, chunk: usize) -> Result<RawResponse, String> {
    let host = base.trim_start_matches("http://").trim_end_matches('/').to_owned();
    let exchange = async {
        let stream = TcpStream::connect(&host).await?;
        let (mut read, mut write) = stream.into_split();
        let head = format!(
            "POST {target} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n\
             Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
        );
        let writer = tokio::spawn(async move {
            write.write_all(head.as_bytes()).await?;
            for part in body.chunks(chunk.max(1)) {
                write.write_all(format!("{:x}\r\n", part.len()).as_bytes()).await?;
                write.write_all(part).await?;
                write.write_all(b"\r\n").await?;
            }
            write.write_all(b"0\r\n\r\n").await?;
            Ok::<_, std::io::Error>(write)
        });
        let mut raw = Vec::new();
        let mut buf = [0u8; 16 * 1024];
        while !complete(&raw, false) {
            let n = read.read(&mut buf).await?;
            if n == 0 {
                break;
            }
            raw.extend_from_slice(&buf[..n]);
        }
        writer.abort();
        Ok::<_, std::io::Error>(raw)
    };
    let raw = tokio::time::timeout(Duration::from_secs(60), exchange)
        .await
        .unwrap_or_else(|_| panic!("POST {target} at {base}: no answer within 60 s"))
        .map_err(|e| format!("POST {target} at {base}: {e}"))?;
    if raw.is_empty() {
        return Err(format!("POST {target} at {base}: the connection closed without an answer"));
    }
    Ok(parse(&raw).unwrap_or_else(|| panic!("POST {target} at {base}: unparsable answer {raw:?}")))
}

/// The requests of a burst, gathered: each sends all of its body but the last bytes, then
/// holds them until every request of the burst has done so (or was answered early), so the
/// server holds every admitted body at once, however fast or slow the machine is.
pub struct Gathering {
    expected: usize,
    arrived: std::sync::atomic::AtomicUsize,
    all_in: tokio::sync::watch::Sender<bool>,
}

impl Gathering {
    /// A gathering of `expected` requests.
    pub fn of(expected: usize) -> std::sync::Arc<Gathering> {
        std::sync::Arc::new(Gathering {
            expected,
            arrived: std::sync::atomic::AtomicUsize::new(0),
            all_in: tokio::sync::watch::Sender::new(false),
        })
    }

    fn arrive(&self) {
        let arrived = self.arrived.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
        if arrived >= self.expected {
            self.all_in.send_replace(true);
        }
    }
}

/// POSTs `body` to `target` at `base` (with `Content-Length` and a bearer `token`) as one of
/// `gathering`: every byte but the last `held` is sent, then the rest once the whole burst is in
/// (an answer that comes first, such as a 429, is read and the rest never sent); then the answer.
pub async fn post_gathered(
    base: &str,
    target: &str,
    token: &str,
    body: &[u8],
    held: usize,
    gathering: &Gathering,
) -> Result<RawResponse, String> {
    let host = base.trim_start_matches("http://").trim_end_matches('/').to_owned();
    let (first, rest) = body.split_at(body.len().saturating_sub(held));
    let exchange = async {
        let mut stream = TcpStream::connect(&host).await?;
        let head = format!(
            "POST {target} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        );
        stream.write_all(head.as_bytes()).await?;
        // A server that refuses the request may answer and stop reading before all of it arrives.
        let sent = stream.write_all(first).await;
        gathering.arrive();
        let mut all_in = gathering.all_in.subscribe();
        let mut early = Vec::new();
        let mut buf = [0u8; 16 * 1024];
        if sent.is_ok() {
            tokio::select! {
                _ = all_in.wait_for(|in_| *in_) => { stream.write_all(rest).await?; }
                n = stream.read(&mut buf) => { early.extend_from_slice(&buf[..n?]); }
            }
        }
        read_response(&mut stream, early, false).await
    };
    let raw = tokio::time::timeout(Duration::from_secs(120), exchange)
        .await
        .map_err(|_| format!("POST {target} at {base}: no answer within 120 s"))?
        .map_err(|e| format!("POST {target} at {base}: {e}"))?;
    parse(&raw).ok_or_else(|| format!("POST {target} at {base}: unparsable answer {raw:?}"))
}

/// Reads from `stream` onto `raw` until it holds a whole response, not until the connection
/// closes: some servers keep it open a while despite `Connection: close`.
async fn read_response(stream: &mut TcpStream, mut raw: Vec<u8>, head_request: bool) -> std::io::Result<Vec<u8>> {
    let mut buf = [0u8; 16 * 1024];
    while !complete(&raw, head_request) {
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        raw.extend_from_slice(&buf[..n]);
    }
    Ok(raw)
}

/// Whether `raw` holds a whole response: head, and the body its framing announces.
fn complete(raw: &[u8], head_request: bool) -> bool {
    let Some(split) = raw.windows(4).position(|w| w == b"\r\n\r\n") else {
        return false;
    };
    let head = String::from_utf8_lossy(&raw[..split]).to_ascii_lowercase();
    let body = &raw[split + 4..];
    if head_request {
        return true;
    }
    if head.contains("transfer-encoding: chunked") {
        return body.ends_with(b"0\r\n\r\n");
    }
    let length = head.lines().find_map(|l| l.strip_prefix("content-length:")).and_then(|v| v.trim().parse().ok());
    length.is_some_and(|len: usize| body.len() >= len)
}

fn parse(raw: &[u8]) -> Option<RawResponse> {
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = std::str::from_utf8(&raw[..split]).ok()?;
    let mut lines = head.split("\r\n");
    let status = lines.next()?.split(' ').nth(1)?.parse().ok()?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let mut body = raw[split + 4..].to_vec();
    if headers.iter().any(|(n, v)| n == "transfer-encoding" && v.eq_ignore_ascii_case("chunked")) {
        body = dechunk(&body)?;
    }
    Some(RawResponse { status, headers, body: String::from_utf8_lossy(&body).into_owned() })
}

fn dechunk(mut rest: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let line_end = rest.windows(2).position(|w| w == b"\r\n")?;
        let size_text = std::str::from_utf8(&rest[..line_end]).ok()?;
        let size = usize::from_str_radix(size_text.split(';').next()?.trim(), 16).ok()?;
        rest = &rest[line_end + 2..];
        if size == 0 {
            return Some(out);
        }
        out.extend_from_slice(rest.get(..size)?);
        rest = rest.get(size + 2..)?;
    }
}
