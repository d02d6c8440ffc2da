//! How the report spells things: the gist of an error body or a client error, and UTC times.

/// What an error body says: the problem's `detail`, else the start of the body.
pub(super) fn error_text(body: &str) -> String {
    let detail = serde_json::from_str::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v.get("detail").and_then(|d| d.as_str()).map(str::to_owned));
    detail.unwrap_or_else(|| body.chars().take(80).collect())
}

/// The gist of a client error: its innermost cause.
pub(super) fn transport_text(error: &str) -> String {
    for cause in ["ConnectionReset", "ConnectionRefused", "IncompleteMessage", "TimedOut", "timed out"] {
        if error.contains(cause) {
            return cause.to_owned();
        }
    }
    error.chars().take(80).collect()
}

/// `YYYY-MM-DDTHH:MM:SS.mmmZ` from ms since the Unix epoch (civil-from-days, proleptic
/// Gregorian).
pub(super) fn utc(unix_ms: u64) -> String {
    let (secs, ms) = (unix_ms / 1000, unix_ms % 1000);
    let (days, rest) = ((secs / 86_400) as i64, secs % 86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{ms:03}Z", rest / 3600, rest / 60 % 60, rest % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_printed_in_utc() {
        assert_eq!(utc(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(utc(951_782_400_123), "2000-02-29T00:00:00.123Z");
        assert_eq!(utc(1_796_281_478_437), "2026-12-03T07:04:38.437Z");
    }

    #[test]
    fn errors_are_cut_to_their_gist() {
        assert_eq!(
            error_text(r#"{"detail":"the database did not answer","status":503}"#),
            "the database did not answer"
        );
        assert_eq!(
            transport_text("reqwest::Error { kind: Request, source: ConnectError(ConnectionRefused) }"),
            "ConnectionRefused"
        );
    }
}
