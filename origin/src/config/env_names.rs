//! The `BLOOMGATE_*` environment variables this binary reads: one per setting, plus the
//! command line's own. Any other name with the prefix is a mistake (`BLOOMGATE_REDIS_ULR`
//! would otherwise start an origin with no Redis), so it is refused, with the nearest real name.

use super::{Config, ConfigError, ENV_PREFIX};

/// The command line's own variables, which are not settings (a test of the command line holds
/// this list to the variables its arguments read).
pub const BINARY_ENV: &[&str] =
    &["BLOOMGATE_CONFIG", "BLOOMGATE_LOG_FORMAT", "BLOOMGATE_ORIGIN_URL", "BLOOMGATE_TOKEN", "BLOOMGATE_CA_FILE"];

/// Refuses every `BLOOMGATE_*` name in `names` that is neither a setting nor one of
/// [`BINARY_ENV`], naming each with the nearest real name.
pub(super) fn refuse_unknown<'a>(names: impl IntoIterator<Item = &'a str>) -> Result<(), ConfigError> {
    let known: Vec<String> = Config::setting_names()
        .iter()
        .map(|s| format!("{ENV_PREFIX}{}", s.to_ascii_uppercase()))
        .chain(BINARY_ENV.iter().map(|s| s.to_string()))
        .collect();
    let mut unknown: Vec<String> = names
        .into_iter()
        .filter(|name| name.starts_with(ENV_PREFIX) && !known.iter().any(|k| k == name))
        .map(|name| match nearest(name, &known) {
            Some(near) => format!("{name} (did you mean {near}?)"),
            None => name.to_owned(),
        })
        .collect();
    if unknown.is_empty() {
        return Ok(());
    }
    unknown.sort();
    Err(ConfigError::Invalid(format!(
        "unknown environment variable{}: {}. Every {ENV_PREFIX}* variable must name a setting (docs/operations.md, Configuration); unset {}",
        if unknown.len() == 1 { "" } else { "s" },
        unknown.join(", "),
        if unknown.len() == 1 { "it" } else { "them" },
    )))
}

/// The known name closest to `name`, if it is close enough to be what was meant: at most a
/// third of its characters typed differently (a swap of two neighbours counts once).
fn nearest<'k>(name: &str, known: &'k [String]) -> Option<&'k str> {
    let suffix = |s: &str| s.trim_start_matches(ENV_PREFIX).to_owned();
    let typed = suffix(name);
    let (best, distance) =
        known.iter().map(|k| (k.as_str(), edits(&typed, &suffix(k)))).min_by_key(|(_, distance)| *distance)?;
    (distance <= typed.chars().count().div_ceil(3).max(1)).then_some(best)
}

/// Edits (insert, delete, replace, or swap two neighbours) that turn `a` into `b` (the optimal
/// string alignment distance).
fn edits(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (d[i - 1][j] + 1).min(d[i][j - 1] + 1).min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = best;
        }
    }
    d[a.len()][b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_typo_is_refused_with_the_name_meant() {
        let err = refuse_unknown(["BLOOMGATE_REDIS_ULR"]).unwrap_err().to_string();
        assert!(err.contains("BLOOMGATE_REDIS_ULR (did you mean BLOOMGATE_REDIS_URL?)"), "{err}");
        let err = refuse_unknown(["BLOOMGATE_WRITER_TOKEN"]).unwrap_err().to_string();
        assert!(err.contains("did you mean BLOOMGATE_WRITER_TOKENS?"), "{err}");
        let err = refuse_unknown(["BLOOMGATE_CASANDRA_NODES", "BLOOMGATE_ZZZZZZZZZZZZZZZZ"]).unwrap_err().to_string();
        assert!(err.contains("did you mean BLOOMGATE_CASSANDRA_NODES?"), "{err}");
        assert!(err.contains("BLOOMGATE_ZZZZZZZZZZZZZZZZ.") || err.contains("BLOOMGATE_ZZZZZZZZZZZZZZZZ,"), "{err}");
        assert!(!err.contains("ZZZZ (did you mean"), "nothing is near it: no guess");
    }

    #[test]
    fn settings_the_binarys_own_names_and_other_prefixes_pass() {
        let names =
            ["BLOOMGATE_REDIS_URL", "BLOOMGATE_CONFIG", "BLOOMGATE_TOKEN", "BG_TEST_REDIS", "PATH", "bloomgate_x"];
        refuse_unknown(names).unwrap();
    }

    #[test]
    fn edits_count_swaps_once() {
        assert_eq!(edits("URL", "ULR"), 1);
        assert_eq!(edits("", "abc"), 3);
        assert_eq!(edits("kitten", "sitting"), 3);
    }
}
