//! `bloomgate-origin load`: bulk-loads keys through a running origin's write API, so every key
//! takes the same filter-first path as any other write.
//!
//! Lines are checked against the filter's key format before sending; bad ones are reported
//! with their line numbers and skipped (or stop the load with `--abort-on-bad-line`). Reading
//! is bounded (a reader thread feeds a small channel of batches); batches are retried by the
//! client after 429, 5xx and transport errors, with jittered exponential backoff that waits at
//! least what the origin's `Retry-After` asks. Progress is over the file's bytes, with an ETA.

use bloomgate_client::{Client, RetryPolicy};
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

/// How a batch is tried again: up to `ATTEMPTS` times, the backoff from 100 ms up to 5 s, at
/// most a minute of waiting per batch (longer only if the origin's `Retry-After` asks more,
/// which fails the batch instead).
fn retries() -> RetryPolicy {
    RetryPolicy::default()
        .attempts(ATTEMPTS)
        .backoff(Duration::from_millis(100), Duration::from_secs(5))
        .total_wait(Duration::from_secs(60))
}

/// What to load and how.
#[derive(Clone, Debug)]
pub struct LoadOptions {
    /// A client of the origin, with a writer token.
    pub client: Client,
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
    /// Why the line was refused.
    pub reason: String,
}

/// Reads lines of at most `MAX_LINE` bytes, calling `on_key` for valid keys and `on_bad` for
/// bad lines, each with the bytes of input the line took (newline included, so they add up to
/// the input's size); stops early when either returns false.
pub fn scan_lines(
    input: impl Read,
    format: KeyFormat,
    mut on_key: impl FnMut(String, u64) -> bool,
    mut on_bad: impl FnMut(BadLine, u64) -> bool,
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
        let mut bytes = read as u64;
        let complete = line.last() == Some(&b'\n');
        if !complete && line.len() > MAX_LINE {
            // Skip the rest of the over-long line without holding it.
            let mut sink = Vec::new();
            while !sink.ends_with(b"\n") {
                sink.clear();
                let more = (&mut reader).take(64 * 1024).read_until(b'\n', &mut sink)?;
                if more == 0 {
                    break;
                }
                bytes += more as u64;
            }
            if !on_bad(BadLine { line: number, reason: format!("line is longer than {MAX_LINE} bytes") }, bytes) {
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
            Ok(key) => on_key(key, bytes),
            Err(reason) => on_bad(BadLine { line: number, reason }, bytes),
        };
        if !keep_going {
            return Ok(());
        }
    }
}

/// Keys to send, and the bytes of input they (and any bad lines before them) took.
struct Batch {
    keys: Vec<String>,
    input_bytes: u64,
}

/// Progress over the input's bytes, with an ETA, when its size is known (a file); a spinner
/// over bytes otherwise (stdin). A batch's bytes count once the origin acknowledged it.
fn bytes_bar(size: Option<u64>) -> anyhow::Result<ProgressBar> {
    Ok(match size {
        Some(size) => {
            let bar = ProgressBar::new(size);
            bar.set_style(
                ProgressStyle::with_template(
                    "{bar:30} {binary_bytes}/{binary_total_bytes} {binary_bytes_per_sec}, {eta} left; {msg}",
                )?
                .progress_chars("=> "),
            );
            bar
        }
        None => {
            let bar = ProgressBar::new_spinner();
            bar.set_style(ProgressStyle::with_template("{spinner} {binary_bytes} read and stored; {msg} {elapsed}")?);
            bar
        }
    })
}

/// Loads `file` (`-` = stdin) into the filter.
pub async fn load(file: &Path, options: &LoadOptions) -> anyhow::Result<LoadReport> {
    let started = Instant::now();
    let client = options.client.with_retries(retries());
    let stats = client
        .stats(&options.filter)
        .await
        .map_err(|e| anyhow::anyhow!("cannot read filter {:?} from {}: {e}", options.filter, client.base()))?;
    let format: KeyFormat = stats.key_format.as_deref().unwrap_or("bytes").parse()?;
    let size = match file.as_os_str() == "-" {
        true => None,
        false => {
            Some(std::fs::metadata(file).map_err(|e| anyhow::anyhow!("cannot read {}: {e}", file.display()))?.len())
        }
    };
    let (tx, rx) = tokio::sync::mpsc::channel::<Batch>(options.concurrency.max(1) * 2);
    let (bad_tx, bad_rx) = tokio::sync::mpsc::unbounded_channel::<BadLine>();
    let reader = read_batches(file, format, options, tx, bad_tx);
    let progress = bytes_bar(size)?;
    let mut report = send_batches(&client, options, rx, bad_rx, &progress).await;
    reader.await??;
    progress.finish_and_clear();
    if options.abort_on_bad_line && report.bad_lines > 0 {
        anyhow::bail!(
            "stopped at the first bad line (--abort-on-bad-line); {} keys were stored before it",
            report.stored
        );
    }
    report.elapsed = started.elapsed();
    Ok(report)
}

/// Reads `file` on a blocking thread into batches of `options.batch` keys (`tx`), reporting
/// bad lines (`bad`); stops at the first bad one with `abort_on_bad_line`.
fn read_batches(
    file: &Path,
    format: KeyFormat,
    options: &LoadOptions,
    tx: tokio::sync::mpsc::Sender<Batch>,
    bad: tokio::sync::mpsc::UnboundedSender<BadLine>,
) -> tokio::task::JoinHandle<std::io::Result<()>> {
    let path = file.to_owned();
    let (batch, abort) = (options.batch.max(1), options.abort_on_bad_line);
    tokio::task::spawn_blocking(move || -> std::io::Result<()> {
        let input: Box<dyn Read> =
            if path.as_os_str() == "-" { Box::new(std::io::stdin()) } else { Box::new(std::fs::File::open(&path)?) };
        let mut pending = Batch { keys: Vec::with_capacity(batch), input_bytes: 0 };
        // A bad line's bytes go with the next batch, so the bar still ends at the size.
        let bad_bytes = std::cell::Cell::new(0u64);
        scan_lines(
            input,
            format,
            |key, bytes| {
                pending.keys.push(key);
                pending.input_bytes += bytes + bad_bytes.take();
                if pending.keys.len() == batch {
                    let next = Batch { keys: Vec::with_capacity(batch), input_bytes: 0 };
                    return tx.blocking_send(std::mem::replace(&mut pending, next)).is_ok();
                }
                true
            },
            |line, bytes| {
                bad_bytes.set(bad_bytes.get() + bytes);
                bad.send(line).is_ok() && !abort
            },
        )?;
        pending.input_bytes += bad_bytes.take();
        if !pending.keys.is_empty() || pending.input_bytes > 0 {
            let _ = tx.blocking_send(pending);
        }
        Ok(())
    })
}

/// Sends the batches read, `options.concurrency` at a time, and reports bad lines as they
/// come, until the reader is done and every batch sent has been answered.
async fn send_batches(
    client: &Client,
    options: &LoadOptions,
    mut batches: tokio::sync::mpsc::Receiver<Batch>,
    mut bad: tokio::sync::mpsc::UnboundedReceiver<BadLine>,
    progress: &ProgressBar,
) -> LoadReport {
    use futures::StreamExt;
    let mut report = LoadReport::default();
    let mut in_flight = futures::stream::FuturesUnordered::new();
    let bad_line = |report: &mut LoadReport, line: BadLine| {
        report.bad_lines += 1;
        progress.println(format!("line {}: {}", line.line, line.reason));
    };
    let settle = |report: &mut LoadReport, result: anyhow::Result<(u64, u64)>| match result {
        Ok((stored, bytes)) => {
            report.stored += stored;
            progress.inc(bytes);
            progress.set_message(format!("{} keys stored", report.stored));
        }
        Err(e) => {
            report.failed_batches += 1;
            progress.println(format!("batch failed: {e}"));
        }
    };
    loop {
        tokio::select! {
            Some(line) = bad.recv() => bad_line(&mut report, line),
            Some(result) = in_flight.next(), if !in_flight.is_empty() => settle(&mut report, result),
            next = batches.recv(), if in_flight.len() < options.concurrency.max(1) => {
                match next {
                    Some(batch) => in_flight.push(send_batch(client, options, batch)),
                    None => {
                        while let Some(result) = in_flight.next().await {
                            settle(&mut report, result);
                        }
                        break;
                    }
                }
            }
        }
    }
    // What the reader reported after the last batch.
    while let Ok(line) = bad.try_recv() {
        bad_line(&mut report, line);
    }
    report
}

/// Sends one batch (the client tries it again as [`retries`] says); the keys stored and the
/// input bytes they account for.
async fn send_batch(client: &Client, options: &LoadOptions, batch: Batch) -> anyhow::Result<(u64, u64)> {
    if batch.keys.is_empty() {
        return Ok((0, batch.input_bytes));
    }
    let n = batch.keys.len();
    client.insert_batch(&options.filter, &batch.keys).await.map_err(|e| match e.is_retryable() {
        true => anyhow::anyhow!("batch of {n} keys not stored: {e} (gave up after at most {ATTEMPTS} attempts)"),
        false => anyhow::anyhow!("batch of {n} keys not stored: the origin refused it: {e}"),
    })?;
    Ok((n as u64, batch.input_bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_lines_are_reported_with_numbers_and_good_ones_pass() {
        let input = "aa\nzz\n\nabcd\r\n".to_string() + &"a".repeat(MAX_LINE + 10) + "\nff\n";
        let (mut keys, mut bad, total) = (Vec::new(), Vec::new(), std::cell::Cell::new(0u64));
        scan_lines(
            input.as_bytes(),
            KeyFormat::Hex { digits: None },
            |k, n| {
                keys.push(k);
                total.set(total.get() + n);
                true
            },
            |b, n| {
                bad.push(b);
                total.set(total.get() + n);
                true
            },
        )
        .unwrap();
        assert_eq!(keys, ["aa", "abcd", "ff"]);
        let lines: Vec<u64> = bad.iter().map(|b| b.line).collect();
        assert_eq!(lines, [2, 3, 5]);
        assert!(bad[2].reason.contains("longer than"));
        assert_eq!(total.get(), input.len() as u64, "the lines' bytes add up to the input's");
    }

    #[test]
    fn abort_stops_at_the_first_bad_line() {
        let mut keys = Vec::new();
        scan_lines(
            "aa\nxx\nbb\n".as_bytes(),
            KeyFormat::Hex { digits: None },
            |k, _| {
                keys.push(k);
                true
            },
            |_, _| false,
        )
        .unwrap();
        assert_eq!(keys, ["aa"]);
    }
}
