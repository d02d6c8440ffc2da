//! The worker's settings, read from its environment once per request into a typed struct.

use core::fmt;

/// Name of the variable holding the origin's base URL.
pub const ORIGIN_URL: &str = "ORIGIN_URL";
/// Name of the secret the edge presents to the origin.
pub const EDGE_SECRET: &str = "EDGE_SECRET";
/// Name of the variable bounding how stale a cached segment may be, in seconds.
pub const FRESHNESS_SECS: &str = "FRESHNESS_SECS";
/// Default freshness bound S. With the insert journal, keeping held segments current costs a
/// request per S/2 of about 20 bytes per key written since, whatever the filter's size, so a
/// short S is cheap.
pub const DEFAULT_FRESHNESS_SECS: u32 = 2;

/// Name of the optional variable bounding the in-isolate segment cache, in MiB.
pub const MEMORY_CACHE_MB: &str = "MEMORY_CACHE_MB";
/// Default in-isolate segment cache: well under the 128 MB isolate limit, since wasm memory
/// never shrinks once grown.
pub const DEFAULT_MEMORY_CACHE_MB: u32 = 32;

/// Name of the optional variable bounding the keys in one batch lookup.
pub const MAX_BATCH: &str = "MAX_BATCH";
/// Default batch bound: the origin's default `max_batch`, so a batch the edge takes is one the
/// origin takes too.
pub const DEFAULT_MAX_BATCH: usize = 1000;
/// Largest `MAX_BATCH` accepted: a batch body is read whole (at most 4 MiB), and every key in
/// it may need a segment.
pub const MAX_BATCH_LIMIT: usize = 100_000;

/// Name of the optional variable that turns on one log line per request (`true` or `false`).
pub const LOG_REQUESTS: &str = "LOG_REQUESTS";

/// Typed configuration of the edge worker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EdgeConfig {
    /// Base URL of the origin, without a trailing slash.
    pub origin_url: String,
    /// Shared secret the edge presents to the origin.
    pub edge_secret: String,
    /// The freshness bound S: a key acknowledged by the origin is answered "seen" here at
    /// most this many seconds later (the manifest's lifetime in the isolate).
    pub freshness_secs: u32,
    /// Bytes of segments held in isolate memory.
    pub memory_cache_bytes: usize,
    /// Most keys in one batch lookup; a bigger batch is refused (413) before any work.
    pub max_batch: usize,
    /// Log a line for every request, not only errors. Off by default: under `wrangler dev`
    /// every console message is kept until a DevTools client attaches (its inspector proxy
    /// buffers them), so a line per request grows workerd's heap without bound.
    pub log_requests: bool,
}

/// A setting that is missing or malformed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigError {
    /// The named variable is not set.
    Missing(&'static str),
    /// The named variable is set but cannot be used.
    Invalid {
        /// Which variable.
        name: &'static str,
        /// Why it was rejected.
        reason: &'static str,
    },
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Missing(name) => write!(f, "{name} is not set"),
            Self::Invalid { name, reason } => write!(f, "{name} is invalid: {reason}"),
        }
    }
}

impl std::error::Error for ConfigError {}

impl EdgeConfig {
    /// Builds the configuration from a lookup function, so the same parsing serves the
    /// Workers `Env` on wasm and plain maps in native tests.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let origin_url = lookup(ORIGIN_URL).ok_or(ConfigError::Missing(ORIGIN_URL))?;
        let origin_url = origin_url.trim().trim_end_matches('/').to_owned();
        if !(origin_url.starts_with("http://") || origin_url.starts_with("https://")) {
            return Err(ConfigError::Invalid { name: ORIGIN_URL, reason: "must start with http:// or https://" });
        }
        let edge_secret = lookup(EDGE_SECRET).ok_or(ConfigError::Missing(EDGE_SECRET))?;
        if edge_secret.is_empty() {
            return Err(ConfigError::Invalid { name: EDGE_SECRET, reason: "must not be empty" });
        }
        let freshness_secs = match lookup(FRESHNESS_SECS) {
            None => DEFAULT_FRESHNESS_SECS,
            Some(v) => v.trim().parse().map_err(|_| ConfigError::Invalid {
                name: FRESHNESS_SECS,
                reason: "must be a whole number of seconds",
            })?,
        };
        if freshness_secs == 0 {
            return Err(ConfigError::Invalid { name: FRESHNESS_SECS, reason: "must be at least 1 second" });
        }
        let memory_mb: u32 = match lookup(MEMORY_CACHE_MB) {
            None => DEFAULT_MEMORY_CACHE_MB,
            Some(v) => v.trim().parse().ok().filter(|mb| (1..=96).contains(mb)).ok_or(ConfigError::Invalid {
                name: MEMORY_CACHE_MB,
                reason: "must be a whole number of MiB from 1 to 96 (the isolate has 128 MB in all)",
            })?,
        };
        let max_batch = match lookup(MAX_BATCH) {
            None => DEFAULT_MAX_BATCH,
            Some(v) => {
                v.trim().parse().ok().filter(|n| (1..=MAX_BATCH_LIMIT).contains(n)).ok_or(ConfigError::Invalid {
                    name: MAX_BATCH,
                    reason: "must be a whole number of keys from 1 to 100000 (keep it at most the origin's max_batch)",
                })?
            }
        };
        let log_requests = match lookup(LOG_REQUESTS).as_deref().map(str::trim) {
            None | Some("" | "false" | "0") => false,
            Some("true" | "1") => true,
            Some(_) => return Err(ConfigError::Invalid { name: LOG_REQUESTS, reason: "must be true or false" }),
        };
        Ok(Self {
            origin_url,
            edge_secret,
            freshness_secs,
            memory_cache_bytes: memory_mb as usize * 1024 * 1024,
            max_batch,
            log_requests,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn parse(pairs: &[(&str, &str)]) -> Result<EdgeConfig, ConfigError> {
        let map: HashMap<String, String> = pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        EdgeConfig::from_lookup(|name| map.get(name).cloned())
    }

    const DEV: &[(&str, &str)] =
        &[(ORIGIN_URL, "http://127.0.0.1:8080/"), (EDGE_SECRET, "dev-edge-secret"), (FRESHNESS_SECS, "2")];

    #[test]
    fn parses_the_wrangler_dev_defaults() {
        let config = parse(DEV).unwrap();
        assert_eq!(config.origin_url, "http://127.0.0.1:8080", "trailing slash is dropped");
        assert_eq!(config.edge_secret, "dev-edge-secret");
        assert_eq!(config.freshness_secs, 2);
        assert_eq!(config.max_batch, DEFAULT_MAX_BATCH);
        assert!(!config.log_requests, "quiet unless asked");
    }

    #[test]
    fn request_logging_is_a_switch() {
        let with = |v: &str| parse(&[DEV[0], DEV[1], DEV[2], (LOG_REQUESTS, v)]);
        for on in ["true", " 1 "] {
            assert!(with(on).unwrap().log_requests, "{on}");
        }
        for off in ["false", "0", ""] {
            assert!(!with(off).unwrap().log_requests, "{off:?}");
        }
        assert!(matches!(with("yes"), Err(ConfigError::Invalid { name: LOG_REQUESTS, .. })));
    }

    #[test]
    fn max_batch_is_a_bounded_count() {
        let with = |v: &str| parse(&[DEV[0], DEV[1], DEV[2], (MAX_BATCH, v)]);
        assert_eq!(with(" 250 ").unwrap().max_batch, 250);
        assert_eq!(with("100000").unwrap().max_batch, MAX_BATCH_LIMIT);
        for bad in ["0", "-1", "100001", "1e3", "", "lots"] {
            let err = with(bad).unwrap_err();
            assert!(matches!(err, ConfigError::Invalid { name: MAX_BATCH, .. }), "{bad}: {err}");
            assert!(err.to_string().starts_with("MAX_BATCH is invalid: must be a whole number of keys"), "{err}");
        }
    }

    #[test]
    fn names_the_missing_variable() {
        assert_eq!(parse(&DEV[1..]), Err(ConfigError::Missing(ORIGIN_URL)));
        assert_eq!(parse(&[DEV[0]]), Err(ConfigError::Missing(EDGE_SECRET)));
        assert_eq!(parse(&DEV[..2]).unwrap().freshness_secs, DEFAULT_FRESHNESS_SECS, "S defaults to 2 s");
    }

    #[test]
    fn rejects_unusable_values() {
        let bad_url = [(ORIGIN_URL, "127.0.0.1:8080"), DEV[1], DEV[2]];
        assert!(matches!(parse(&bad_url), Err(ConfigError::Invalid { name: ORIGIN_URL, .. })));
        let bad_secs = [DEV[0], DEV[1], (FRESHNESS_SECS, "five")];
        assert!(matches!(parse(&bad_secs), Err(ConfigError::Invalid { name: FRESHNESS_SECS, .. })));
        let empty_secret = [DEV[0], (EDGE_SECRET, ""), DEV[2]];
        assert!(matches!(parse(&empty_secret), Err(ConfigError::Invalid { name: EDGE_SECRET, .. })));
    }
}
