//! `bloomgate-origin stats` as a table people read: the stats endpoint's JSON, each figure
//! with its unit, grouped the way an operator asks (how full, how wrong, how it is being
//! rebuilt). `--json` prints the JSON itself.

use serde_json::Value;
use std::fmt::Write as _;

/// A whole number with thousands separators (a float, such as a rate or an ETA, rounded).
fn count(v: &Value) -> Option<String> {
    let n = v.as_u64().or_else(|| v.as_f64().filter(|f| f.is_finite() && *f >= 0.0).map(|f| f.round() as u64))?;
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    Some(out)
}

fn percent(v: &Value) -> Option<String> {
    v.as_f64().map(|r| format!("{:.4} %", 100.0 * r))
}

fn bytes(v: &Value) -> Option<String> {
    let b = v.as_f64()?;
    Some(match b {
        b if b >= (1u64 << 30) as f64 => format!("{:.2} GiB", b / (1u64 << 30) as f64),
        b if b >= (1u64 << 20) as f64 => format!("{:.2} MiB", b / (1u64 << 20) as f64),
        b if b >= 1024.0 => format!("{:.1} KiB", b / 1024.0),
        b => format!("{b:.0} B"),
    })
}

fn text(v: &Value) -> Option<String> {
    match v {
        Value::Null => None,
        Value::String(s) => Some(s.clone()),
        other => Some(other.to_string()),
    }
}

type Row = (&'static str, &'static str, fn(&Value) -> Option<String>);

const SECTIONS: &[(&str, &[Row])] = &[
    (
        "filter",
        &[
            ("name", "filter", text),
            ("key format", "key_format", text),
            ("generation", "generation", text),
            ("previous generation (kept for edges)", "previous_generation", text),
            ("generation being built", "building_generation", text),
        ],
    ),
    (
        "size",
        &[
            ("capacity, keys", "capacity", count),
            ("estimated keys", "estimated_keys", count),
            ("fill ratio (bits set)", "fill_ratio", percent),
            ("segments", "segment_count", count),
            ("segment size", "segment_bytes", bytes),
            ("memory in the filter store", "memory_bytes", bytes),
            ("hash functions (k)", "k", text),
        ],
    ),
    (
        "false positives",
        &[
            ("target rate", "target_fp_rate", percent),
            ("expected at capacity", "expected_fp_rate_at_capacity", percent),
            ("expected now", "expected_fp_rate_now", percent),
            ("observed, of absent-key lookups", "observed_fp_rate", percent),
            ("observed, of the filter's \"maybe\"s", "false_positive_share_of_maybes", percent),
        ],
    ),
    (
        "lookups",
        &[
            ("read consistency", "read_consistency", text),
            ("read lease, ms", "read_lease_ms", text),
            ("answered \"no\" by the filter", "lookups_answered_by_filter", count),
            ("of which from memory under the lease", "lookups_answered_under_lease", count),
            ("\"maybe\" (read from the database)", "filter_maybes", count),
            ("of which absent (false positives)", "observed_false_positives", count),
        ],
    ),
    (
        "upkeep",
        &[
            ("deletes since the build", "deletes_since_build", count),
            ("insert journal entries", "journal_entries", count),
            ("insert journal memory", "journal_bytes", bytes),
        ],
    ),
];

const REBUILD: &[Row] = &[
    ("rebuild generation", "generation", text),
    ("rebuild phase", "phase", text),
    ("keys scanned", "keys_scanned", count),
    ("keys expected", "keys_expected", count),
    ("keys per second", "keys_per_sec", count),
    ("seconds left (estimate)", "eta_secs", count),
];

/// The stats as aligned `label  value` lines under section headings; figures the origin did
/// not send (none yet, or not applicable) are left out.
pub fn render(stats: &Value) -> String {
    let mut rows: Vec<(String, Vec<(&str, String)>)> = Vec::new();
    for (section, fields) in SECTIONS {
        let lines = fields.iter().filter_map(|(label, key, fmt)| fmt(&stats[*key]).map(|v| (*label, v))).collect();
        rows.push(((*section).to_owned(), lines));
    }
    if stats["rebuild"].is_object() {
        let r = &stats["rebuild"];
        rows.push(("rebuild".into(), REBUILD.iter().filter_map(|(l, k, f)| f(&r[*k]).map(|v| (*l, v))).collect()));
    }
    let width = rows.iter().flat_map(|(_, lines)| lines.iter().map(|(l, _)| l.chars().count())).max().unwrap_or(0);
    let mut out = String::new();
    for (section, lines) in rows.iter().filter(|(_, lines)| !lines.is_empty()) {
        let _ = writeln!(out, "{section}");
        for (label, value) in lines {
            let _ = writeln!(out, "  {label:<width$}  {value}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_carry_their_units_and_missing_ones_are_left_out() {
        let stats = serde_json::json!({
            "filter": "users", "key_format": "hex:64", "generation": 7, "previous_generation": null,
            "capacity": 1_000_000, "estimated_keys": 987_654, "fill_ratio": 0.4512,
            "segment_bytes": 65536, "memory_bytes": 1_310_720, "target_fp_rate": 0.01,
            "observed_fp_rate": null, "journal_bytes": 5_000_000_000u64,
            "read_consistency": "lease", "read_lease_ms": 10.0, "lookups_answered_under_lease": 12_345,
            "rebuild": { "phase": "scanning", "keys_scanned": 1234, "eta_secs": 12.0 },
        });
        let table = render(&stats);
        for line in [
            "  name ",
            "users",
            "987,654",
            "45.1200 %",
            "64.0 KiB",
            "1.25 MiB",
            "4.66 GiB",
            "1.0000 %",
            "rebuild\n",
            "scanning",
            "1,234",
            "read consistency",
            "lease\n",
            "12,345",
        ] {
            assert!(table.contains(line), "{line:?} missing from\n{table}");
        }
        assert!(!table.contains("previous generation"), "null figures are left out:\n{table}");
        assert!(!table.contains("observed, of absent"), "{table}");
        assert!(table.contains("seconds left (estimate)") && table.contains("  12\n"), "{table}");
    }
}
