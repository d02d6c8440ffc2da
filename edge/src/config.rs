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

/// Name of the optional variable bounding what the isolate holds between requests (segment
/// copies, spare segment buffers, journal tails), in bytes (`33554432`) or with a unit
/// (`32MiB`, `512KiB`).
pub const EDGE_MAX_HELD_BYTES: &str = "EDGE_MAX_HELD_BYTES";
/// The older name of that bound, in whole MiB: read only when `EDGE_MAX_HELD_BYTES` is unset.
pub const MEMORY_CACHE_MB: &str = "MEMORY_CACHE_MB";
const MIB: usize = 1024 * 1024;
/// Default held bytes: a quarter of the isolate's 128 MB. wasm memory never shrinks, and the
/// rest is for the work of requests in progress (bodies, a segment per lookup loading one),
/// the module itself and the JavaScript side.
pub const DEFAULT_MAX_HELD_BYTES: usize = 32 * MIB;
/// The range `EDGE_MAX_HELD_BYTES` accepts.
pub const HELD_BYTES_RANGE: core::ops::RangeInclusive<usize> = MIB..=96 * MIB;

/// Name of the optional switch for the Cache API tier (`true` or `false`, default `true`):
/// `false` keeps segments in isolate memory and the origin only (a bypass for measuring).
pub const CACHE_API: &str = "CACHE_API";

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

/// Name of the optional variable: seconds between an isolate's data points for the fleet
/// (`crate::fleet_counts`), 1 to 3600.
pub const FLEET_POINT_SECS: &str = "FLEET_POINT_SECS";
/// The range `FLEET_POINT_SECS` accepts: an hour at most, so no isolate goes unseen for long.
pub const FLEET_POINT_SECS_RANGE: core::ops::RangeInclusive<u32> = 1..=3600;

/// Name of the optional switch for following the shared feed (`true` or `false`, default
/// `false`): sealed chunks through the CDN's cache, answers counted from the chunk
/// (docs/design.md, "The edge at many isolates"). Off until every origin of the deployment
/// records Redis clock steps (each add does from this version on).
pub const SHARED_FEED: &str = "SHARED_FEED";
/// Name of the optional variable: the shared feed's chunk width Δ, ms.
pub const FEED_CHUNK_MS: &str = "FEED_CHUNK_MS";
/// Default Δ.
pub const DEFAULT_FEED_CHUNK_MS: u64 = 250;
/// Name of the optional variable: ε, the most Redis's clock may read ahead of the isolate's, ms.
pub const FEED_CLOCK_BOUND_MS: &str = "FEED_CLOCK_BOUND_MS";
/// Default ε: well above what synchronised clocks differ by; a page that proves more sends the
/// isolate back to its own path.
pub const DEFAULT_FEED_CLOCK_BOUND_MS: u64 = 100;

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
    /// Most bytes the isolate holds between requests (segment copies, spare buffers, journal
    /// tails).
    pub max_held_bytes: usize,
    /// Whether segments are also kept in, and read from, the Cache API.
    pub cache_api: bool,
    /// Most keys in one batch lookup; a bigger batch is refused (413) before any work.
    pub max_batch: usize,
    /// Log a line for every request, not only errors. Off by default: under `wrangler dev`
    /// every console message is kept until a DevTools client attaches (its inspector proxy
    /// buffers them), so a line per request grows workerd's heap without bound.
    pub log_requests: bool,
    /// Seconds between the isolate's data points for the fleet (when the dataset is bound).
    pub fleet_point_secs: u32,
    /// The shared feed, if followed: Δ and ε.
    pub shared_feed: Option<FeedSettings>,
}

/// How the shared feed is followed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FeedSettings {
    /// Chunks of this many ms (what the isolates of a deployment share: one value for all).
    pub chunk_ms: u64,
    /// ε, ms.
    pub clock_bound_ms: u64,
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
        let max_held_bytes = held_bytes(&lookup)?;
        let max_batch = match lookup(MAX_BATCH) {
            None => DEFAULT_MAX_BATCH,
            Some(v) => {
                v.trim().parse().ok().filter(|n| (1..=MAX_BATCH_LIMIT).contains(n)).ok_or(ConfigError::Invalid {
                    name: MAX_BATCH,
                    reason: "must be a whole number of keys from 1 to 100000 (keep it at most the origin's max_batch)",
                })?
            }
        };
        let log_requests = switch(&lookup, LOG_REQUESTS, false)?;
        let cache_api = switch(&lookup, CACHE_API, true)?;
        let fleet_point_secs = match lookup(FLEET_POINT_SECS) {
            None => crate::fleet_counts::DEFAULT_POINT_SECS,
            Some(v) => {
                v.trim().parse().ok().filter(|s| FLEET_POINT_SECS_RANGE.contains(s)).ok_or(ConfigError::Invalid {
                    name: FLEET_POINT_SECS,
                    reason: "must be a whole number of seconds from 1 to 3600",
                })?
            }
        };
        let shared_feed = feed_settings(&lookup, freshness_secs)?;
        Ok(Self {
            origin_url,
            edge_secret,
            freshness_secs,
            max_held_bytes,
            cache_api,
            max_batch,
            log_requests,
            fleet_point_secs,
            shared_feed,
        })
    }
}

/// The shared feed's settings when `SHARED_FEED` is on; ε must leave a "no" some time to stand
/// (less than S).
fn feed_settings(
    lookup: &impl Fn(&str) -> Option<String>,
    freshness_secs: u32,
) -> Result<Option<FeedSettings>, ConfigError> {
    if !switch(lookup, SHARED_FEED, false)? {
        return Ok(None);
    }
    let number = |name: &'static str, default: u64, ok: &dyn Fn(u64) -> bool, reason: &'static str| match lookup(name) {
        None => Ok(default),
        Some(v) => v.trim().parse().ok().filter(|n| ok(*n)).ok_or(ConfigError::Invalid { name, reason }),
    };
    let bounds = bloomgate_filter::sealed_chunk::MIN_CHUNK_MS..=bloomgate_filter::sealed_chunk::MAX_CHUNK_MS;
    let chunk_ms =
        number(FEED_CHUNK_MS, DEFAULT_FEED_CHUNK_MS, &|n| bounds.contains(&n), "must be whole ms from 100 to 1000")?;
    let s_ms = u64::from(freshness_secs) * 1000;
    let clock_bound_ms = number(
        FEED_CLOCK_BOUND_MS,
        DEFAULT_FEED_CLOCK_BOUND_MS,
        &|n| n < s_ms / 2,
        "must be whole ms under half the freshness bound S",
    )?;
    Ok(Some(FeedSettings { chunk_ms, clock_bound_ms }))
}

/// `EDGE_MAX_HELD_BYTES`, else `MEMORY_CACHE_MB` (MiB), else the default.
fn held_bytes(lookup: &impl Fn(&str) -> Option<String>) -> Result<usize, ConfigError> {
    let (name, bytes) = match (lookup(EDGE_MAX_HELD_BYTES), lookup(MEMORY_CACHE_MB)) {
        (Some(v), _) => (EDGE_MAX_HELD_BYTES, parse_bytes(&v)),
        (None, Some(v)) => (MEMORY_CACHE_MB, v.trim().parse::<usize>().ok().and_then(|mb| mb.checked_mul(MIB))),
        (None, None) => return Ok(DEFAULT_MAX_HELD_BYTES),
    };
    bytes.filter(|b| HELD_BYTES_RANGE.contains(b)).ok_or(ConfigError::Invalid {
        name,
        reason: "must be from 1 MiB to 96 MiB (the isolate has 128 MB in all): bytes, or a number with KiB or MiB",
    })
}

/// `1048576`, `1024KiB`, `32MiB`, `32 MiB`.
fn parse_bytes(text: &str) -> Option<usize> {
    let text = text.trim();
    let (number, unit) = match text.find(|c: char| !c.is_ascii_digit()) {
        Some(at) => text.split_at(at),
        None => (text, ""),
    };
    let scale = match unit.trim() {
        "" => 1,
        "KiB" => 1024,
        "MiB" => MIB,
        _ => return None,
    };
    number.parse::<usize>().ok()?.checked_mul(scale)
}

/// A `true`/`false` (or `1`/`0`) setting; `default` when unset or empty.
fn switch(lookup: &impl Fn(&str) -> Option<String>, name: &'static str, default: bool) -> Result<bool, ConfigError> {
    match lookup(name).as_deref().map(str::trim) {
        None | Some("") => Ok(default),
        Some("true" | "1") => Ok(true),
        Some("false" | "0") => Ok(false),
        Some(_) => Err(ConfigError::Invalid { name, reason: "must be true or false" }),
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
    fn held_bytes_take_units_and_the_older_name() {
        let with = |pairs: &[(&str, &str)]| parse(&[DEV, pairs].concat());
        assert_eq!(with(&[]).unwrap().max_held_bytes, DEFAULT_MAX_HELD_BYTES);
        assert_eq!(with(&[(EDGE_MAX_HELD_BYTES, "16MiB")]).unwrap().max_held_bytes, 16 * MIB);
        assert_eq!(with(&[(EDGE_MAX_HELD_BYTES, " 2048 KiB ")]).unwrap().max_held_bytes, 2 * MIB);
        assert_eq!(with(&[(EDGE_MAX_HELD_BYTES, "1048576")]).unwrap().max_held_bytes, MIB);
        assert_eq!(with(&[(MEMORY_CACHE_MB, "8")]).unwrap().max_held_bytes, 8 * MIB, "the older name, in MiB");
        let both = with(&[(MEMORY_CACHE_MB, "8"), (EDGE_MAX_HELD_BYTES, "4MiB")]).unwrap();
        assert_eq!(both.max_held_bytes, 4 * MIB, "the new name wins");
        for bad in ["0", "1048575", "97MiB", "32MB", "lots", "-1", ""] {
            let err = with(&[(EDGE_MAX_HELD_BYTES, bad)]).unwrap_err();
            assert!(matches!(err, ConfigError::Invalid { name: EDGE_MAX_HELD_BYTES, .. }), "{bad}: {err}");
        }
        assert!(matches!(with(&[(MEMORY_CACHE_MB, "200")]), Err(ConfigError::Invalid { name: MEMORY_CACHE_MB, .. })));
    }

    #[test]
    fn the_cache_api_is_on_unless_switched_off() {
        let with = |v: &str| parse(&[DEV[0], DEV[1], DEV[2], (CACHE_API, v)]);
        assert!(parse(DEV).unwrap().cache_api);
        assert!(!with("false").unwrap().cache_api);
        assert!(with("true").unwrap().cache_api);
        assert!(matches!(with("off"), Err(ConfigError::Invalid { name: CACHE_API, .. })));
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
    fn fleet_points_come_a_minute_apart_unless_set() {
        let with = |v: &str| parse(&[DEV[0], DEV[1], DEV[2], (FLEET_POINT_SECS, v)]);
        assert_eq!(parse(DEV).unwrap().fleet_point_secs, crate::fleet_counts::DEFAULT_POINT_SECS);
        assert_eq!(with(" 1 ").unwrap().fleet_point_secs, 1);
        assert_eq!(with("3600").unwrap().fleet_point_secs, 3600);
        for bad in ["0", "3601", "-1", "1.5", "", "often"] {
            let err = with(bad).unwrap_err();
            assert!(matches!(err, ConfigError::Invalid { name: FLEET_POINT_SECS, .. }), "{bad}: {err}");
        }
    }

    #[test]
    fn the_shared_feed_is_off_unless_switched_on_and_its_bounds_are_checked() {
        let with = |pairs: &[(&str, &str)]| parse(&[DEV, pairs].concat());
        assert_eq!(parse(DEV).unwrap().shared_feed, None);
        let on = with(&[(SHARED_FEED, "true")]).unwrap().shared_feed.unwrap();
        assert_eq!((on.chunk_ms, on.clock_bound_ms), (DEFAULT_FEED_CHUNK_MS, DEFAULT_FEED_CLOCK_BOUND_MS));
        let set = with(&[(SHARED_FEED, "1"), (FEED_CHUNK_MS, "500"), (FEED_CLOCK_BOUND_MS, "0")]).unwrap();
        assert_eq!(set.shared_feed, Some(FeedSettings { chunk_ms: 500, clock_bound_ms: 0 }));
        assert_eq!(with(&[(FEED_CHUNK_MS, "5")]).unwrap().shared_feed, None, "read only when on");
        for (name, bad) in
            [(FEED_CHUNK_MS, "99"), (FEED_CHUNK_MS, "1001"), (FEED_CLOCK_BOUND_MS, "1000"), (FEED_CLOCK_BOUND_MS, "x")]
        {
            let err = with(&[(SHARED_FEED, "true"), (name, bad)]).unwrap_err();
            assert!(matches!(err, ConfigError::Invalid { name: n, .. } if n == name), "{name}={bad}: {err}");
        }
        assert!(matches!(with(&[(SHARED_FEED, "yes")]), Err(ConfigError::Invalid { name: SHARED_FEED, .. })));
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
