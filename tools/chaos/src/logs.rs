//! What the processes' logs say after a run: panics (native, or wasm through the panic hook),
//! how the edge died, the automatic rebuilds the origins started.

use std::path::Path;

/// Lines of a log that show a panic: Rust's panic message (native, or wasm through the
/// panic hook) and the trap a wasm panic ends in.
pub fn panic_lines(text: &str) -> Vec<String> {
    text.lines()
        .filter(|l| l.contains("panicked at") || l.contains("RuntimeError: unreachable"))
        .map(|l| l.chars().take(500).collect())
        .collect()
}

/// The lines at the end of the edge's log that say how it died: V8's fatal error (a heap out
/// of memory), the signal `workerd` got. (Not wrangler's `[ERROR]` lines: the Worker logs one
/// for every origin request that fails.) The last five at most.
pub fn crash_lines(tail: &str) -> Vec<String> {
    const SIGNS: [&str; 5] = ["fatal", "out of memory", "Received signal", "Aborted", "Segmentation fault"];
    let lines: Vec<String> =
        tail.lines().filter(|l| SIGNS.iter().any(|s| l.contains(s))).map(|l| l.chars().take(200).collect()).collect();
    lines[lines.len().saturating_sub(5)..].to_vec()
}

/// The last `bytes` of a file (from a line start), for logs too long to read whole.
pub fn log_tail(path: &Path, bytes: u64) -> String {
    use std::io::{Read as _, Seek as _};
    let Ok(mut file) = std::fs::File::open(path) else { return String::new() };
    let len = file.metadata().map_or(0, |m| m.len());
    let _ = file.seek(std::io::SeekFrom::Start(len.saturating_sub(bytes)));
    let mut buf = Vec::new();
    let _ = file.read_to_end(&mut buf);
    let text = String::from_utf8_lossy(&buf);
    match text.find('\n') {
        Some(i) if len > bytes => text[i + 1..].to_owned(),
        _ => text.into_owned(),
    }
}

/// How an origin logs a local copy it dropped because the journal no longer held its position.
const COPY_RESET: &str = "the journal no longer holds the entries after the copy's position";

/// Local copies an origin's log shows it dropped because the journal was trimmed past them.
pub fn copy_resets(text: &str) -> u64 {
    text.lines().filter(|l| l.contains(COPY_RESET)).count() as u64
}

/// Automatic rebuilds an origin's log shows, by reason (`reason="..."` of "starting an
/// automatic rebuild").
pub fn automatic_rebuilds(text: &str) -> Vec<String> {
    text.lines()
        .filter(|l| l.contains("starting an automatic rebuild"))
        .filter_map(|l| {
            let rest = &l[l.find("reason=")? + "reason=".len()..];
            let rest = rest.strip_prefix('"').unwrap_or(rest);
            Some(rest.split('"').next().unwrap_or(rest).trim().to_owned())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn panics_and_rebuild_reasons_are_found_in_logs() {
        let log = "INFO ok\nthread 'tokio-runtime-worker' panicked at origin/src/gate.rs:10:5:\n\
                   2025 WARN bloomgate_origin::recovery: starting an automatic rebuild filter=chaos reason=\"more keys than capacity\"\n";
        assert_eq!(panic_lines(log).len(), 1);
        assert_eq!(automatic_rebuilds(log), vec!["more keys than capacity".to_owned()]);
        let dropped = "INFO bloomgate_origin::local_copy::held: local copy dropped; the next lookup loads it again \
                       filter=chaos generation=7 why=\"the journal no longer holds the entries after the copy's position\"";
        assert_eq!(copy_resets(&format!("{log}{dropped}\n")), 1);
    }

    #[test]
    fn the_edge_log_says_how_workerd_died() {
        // The end of a wrangler log whose workerd died after 1,075 s of a 35-minute run.
        let tail = "GET /v1/filters/chaos/keys/ed2a -> 200\nPOST /v1/filters/chaos/lookups -> 200\n\
                    \u{1b}[31m✘ [ERROR] manifest chaos: Error: Network connection lost.\n\
                    <--- Last few GCs --->\n\
                    [18361:0x73a8ffa92000]  1075950 ms: Mark-Compact (reduce) 1121.4 (1402.2) -> 1121.4 (1402.2) MB\n\
                    V8 fatal error; location = Reached heap limit; message = : allocation failed: JavaScript heap out of memory\n\
                    *** Received signal #6: Aborted\n";
        let lines = crash_lines(tail);
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(lines[0].contains("heap out of memory"));
        let path = std::env::temp_dir().join(format!("bloomgate-chaos-tail-{}.log", rand::random::<u64>()));
        std::fs::write(&path, "first line\nsecond line\nthird\n").unwrap();
        assert_eq!(log_tail(&path, 14), "third\n", "starts at a whole line");
        assert_eq!(log_tail(&path, 1000), "first line\nsecond line\nthird\n");
        std::fs::remove_file(&path).unwrap();
    }
}
