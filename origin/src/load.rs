//! `bloomgate-origin load`: bulk-loads keys through a running origin's write API, so every key
//! takes the same filter-first path as any other write.
//!
//! Lines are checked against the filter's key format before sending; bad ones are reported
//! with their line numbers and skipped (or stop the load with `--abort-on-bad-line`). Reading
//! is bounded (a reader thread feeds a small channel of batches), batches retry on 429/503.

use bloomgate_filter::KeyFormat;
use indicatif::{ProgressBar, ProgressStyle};
use std::fmt;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::time::{Duration, Instant};

/// Longest line accepted; longer ones are reported, never buffered whole.
const MAX_LINE: usize = 4096;
/// Attempts per batch before it counts as failed.
const ATTEMPTS: u32 = 6;

/// What to load and how.
#[derive(Clone, Debug)]
pub struct LoadOptions {
    /// Origin base URL.
    pub origin: String,
    /// Writer token.
    pub token: String,
    /// Filter name.
    pub filter: String,
    /// Keys per request.
    pub batch: usize,
    /// Requests in flight.
    pub concurrency: usize,
    /// Stop at the first bad line.
    pub abort_on_bad_line: bool,
}

/// The outcome of a load.
#[derive(Debug, Default)]
pub struct LoadReport {
    /// Keys acknowledged by the origin.
    pub stored: u64,
    /// Lines refused locally.
    pub bad_lines: u64,
    /// Batches not acknowledged after retries.
    pub failed_batches: u64,
    /// Wall time.
    pub elapsed: Duration,
}

impl fmt::Display for LoadReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let rate = self.stored as f64 / self.elapsed.as_secs_f64().max(1e-9);
        write!(
            f,
            "stored {} keys in {:.1}s ({:.0} keys/s); {} bad lines skipped; {} batches failed",
            self.stored,
            self.elapsed.as_secs_f64(),
            rate,
            self.bad_lines,
            self.failed_batches
        )
    }
}

/// A line the loader refused.
#[derive(Debug, PartialEq, Eq)]
pub struct BadLine {
    /// 1-based line number.
    pub line: u64,
    /// Why.
    pub reason: String,
}

/// Reads lines of at most `MAX_LINE` bytes, calling `on_key` for valid keys and `on_bad` for
/// bad lines; stops early when either returns false.
pub fn scan_lines(
    input: impl Read,
    format: KeyFormat,
    mut on_key: impl FnMut(String) -> bool,
    mut on_bad: impl FnMut(BadLine) -> bool,
) -> std::io::Result<()> {
    let mut reader = BufReader::new(input);
    let mut line = Vec::with_capacity(128);
    let mut number = 0u64;
    loop {
        line.clear();
        let read = (&mut reader).take(MAX_LINE as u64 + 1).read_until(b'\n', &mut line)?;
        if read == 0 {
            return Ok(());
        }
        number += 1;
        let complete = line.last() == Some(&b'\n');
        if !complete && line.len() > MAX_LINE {
            // Skip the rest of the over-long line without holding it.
            let mut sink = Vec::new();
            while !sink.ends_with(b"\n") {
                sink.clear();
                if (&mut reader).take(64 * 1024).read_until(b'\n', &mut sink)? == 0 {
                    break;
                }
            }
            if !on_bad(BadLine { line: number, reason: format!("line is longer than {MAX_LINE} bytes") }) {
                return Ok(());
            }
            continue;
        }
        while matches!(line.last(), Some(b'\n' | b'\r')) {
            line.pop();
        }
        let verdict = std::str::from_utf8(&line)
            .map_err(|_| "line is not UTF-8".to_string())
            .and_then(|text| format.normalize(text.as_bytes()).map(|_| text.to_owned()).map_err(|e| e.to_string()));
        let keep_going = match verdict {
            Ok(key) => on_key(key),
            Err(reason) => on_bad(BadLine { line: number, reason }),
        };
        if !keep_going {
            return Ok(());
        }
    }
}

/// Loads `file` (`-` = stdin) into the filter.
pub async fn load(file: &Path, options: &LoadOptions) -> anyhow::Result<LoadReport> {
    let started = Instant::now();
    let client = reqwest::Client::builder().timeout(Duration::from_secs(30)).build()?;
    let base = options.origin.trim_end_matches('/');
    let stats: serde_json::Value = client
        .get(format!("{base}/v1/filters/{}/stats", options.filter))
        .bearer_auth(&options.token)
        .send()
        .await?
        .error_for_status()
        .map_err(|e| anyhow::anyhow!("cannot read filter {:?} from {base}: {e}", options.filter))?
        .json()
        .await?;
    let format: KeyFormat = stats["key_format"].as_str().unwrap_or("bytes").parse()?;

    let (tx, mut rx) = tokio::sync::mpsc::channel::<Vec<String>>(options.concurrency.max(1) * 2);
    let (bad_tx, mut bad_rx) = tokio::sync::mpsc::unbounded_channel::<BadLine>();
    let path = file.to_owned();
    let (batch, abort) = (options.batch.max(1), options.abort_on_bad_line);
    let reader = tokio::task::spawn_blocking(move || -> std::io::Result<()> {
        let input: Box<dyn Read> =
            if path.as_os_str() == "-" { Box::new(std::io::stdin()) } else { Box::new(std::fs::File::open(&path)?) };
        let mut pending = Vec::with_capacity(batch);
        scan_lines(
            input,
            format,
            |key| {
                pending.push(key);
                if pending.len() == batch {
                    return tx.blocking_send(std::mem::replace(&mut pending, Vec::with_capacity(batch))).is_ok();
                }
                true
            },
            |bad| bad_tx.send(bad).is_ok() && !abort,
        )?;
        if !pending.is_empty() {
            let _ = tx.blocking_send(pending);
        }
        Ok(())
    });

    let progress = ProgressBar::new_spinner();
    progress.set_style(ProgressStyle::with_template("{spinner} {pos} keys stored ({per_sec}) {elapsed} {msg}")?);
    let mut report = LoadReport::default();
    let mut in_flight = futures::stream::FuturesUnordered::new();
    use futures::StreamExt;
    loop {
        tokio::select! {
            Some(bad) = bad_rx.recv() => {
                report.bad_lines += 1;
                progress.println(format!("line {}: {}", bad.line, bad.reason));
            }
            Some(result) = in_flight.next(), if !in_flight.is_empty() => {
                match result {
                    Ok(n) => { report.stored += n; progress.inc(n); }
                    Err(e) => { report.failed_batches += 1; progress.println(format!("batch failed: {e}")); }
                }
            }
            next = rx.recv(), if in_flight.len() < options.concurrency.max(1) => {
                match next {
                    Some(keys) => in_flight.push(send_batch(&client, base, options, keys)),
                    None if in_flight.is_empty() => break,
                    None => {
                        while let Some(result) = in_flight.next().await {
                            match result {
                                Ok(n) => { report.stored += n; progress.inc(n); }
                                Err(e) => { report.failed_batches += 1; progress.println(format!("batch failed: {e}")); }
                            }
                        }
                        break;
                    }
                }
            }
        }
    }
    reader.await??;
    while let Ok(bad) = bad_rx.try_recv() {
        report.bad_lines += 1;
        progress.println(format!("line {}: {}", bad.line, bad.reason));
    }
    progress.finish_and_clear();
    if abort && report.bad_lines > 0 {
        anyhow::bail!(
            "stopped at the first bad line (--abort-on-bad-line); {} keys were stored before it",
            report.stored
        );
    }
    report.elapsed = started.elapsed();
    Ok(report)
}

async fn send_batch(
    client: &reqwest::Client,
    base: &str,
    options: &LoadOptions,
    keys: Vec<String>,
) -> anyhow::Result<u64> {
    let url = format!("{base}/v1/filters/{}/keys", options.filter);
    let body = serde_json::json!({ "keys": keys });
    let mut delay = Duration::from_millis(100);
    for attempt in 1..=ATTEMPTS {
        let response = client.post(&url).bearer_auth(&options.token).json(&body).send().await;
        match response {
            Ok(r) if r.status().is_success() => return Ok(keys.len() as u64),
            Ok(r) if r.status().as_u16() == 429 || r.status().is_server_error() => {}
            Ok(r) => {
                let status = r.status();
                anyhow::bail!("origin refused the batch ({status}): {}", r.text().await.unwrap_or_default());
            }
            Err(e) if attempt == ATTEMPTS => return Err(e.into()),
            Err(_) => {}
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_secs(5));
    }
    anyhow::bail!("batch of {} keys not acknowledged after {ATTEMPTS} attempts", keys.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_lines_are_reported_with_numbers_and_good_ones_pass() {
        let input = "aa\nzz\n\nabcd\r\n".to_string() + &"a".repeat(MAX_LINE + 10) + "\nff\n";
        let (mut keys, mut bad) = (Vec::new(), Vec::new());
        scan_lines(
            input.as_bytes(),
            KeyFormat::Hex { digits: None },
            |k| {
                keys.push(k);
                true
            },
            |b| {
                bad.push(b);
                true
            },
        )
        .unwrap();
        assert_eq!(keys, ["aa", "abcd", "ff"]);
        let lines: Vec<u64> = bad.iter().map(|b| b.line).collect();
        assert_eq!(lines, [2, 3, 5]);
        assert!(bad[2].reason.contains("longer than"));
    }

    #[test]
    fn abort_stops_at_the_first_bad_line() {
        let mut keys = Vec::new();
        scan_lines(
            "aa\nxx\nbb\n".as_bytes(),
            KeyFormat::Hex { digits: None },
            |k| {
                keys.push(k);
                true
            },
            |_| false,
        )
        .unwrap();
        assert_eq!(keys, ["aa"]);
    }
}
