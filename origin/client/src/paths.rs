//! Every endpoint's path: the route patterns, as the origin's router spells them (axum 0.8's
//! `{param}`), the builders that fill one in for a client or the edge, and the matcher the edge
//! routes with. A path segment a builder fills is percent-escaped whole, so a key with `/`,
//! `%`, `?` or spaces reaches the server as one segment, as sent.

use bloomgate_filter::{JournalPosition, Manifest};
use serde::{Deserialize, Serialize};

/// Every filter: `GET` lists them.
pub const FILTERS: &str = "/v1/filters";
/// One filter: `PUT` creates it, `DELETE` drops it.
pub const FILTER: &str = "/v1/filters/{filter}";
/// A filter's stats (`GET`).
pub const STATS: &str = "/v1/filters/{filter}/stats";
/// A filter's online rebuild (`POST`).
pub const REBUILD: &str = "/v1/filters/{filter}/rebuild";
/// A batch of writes (`POST`).
pub const KEYS: &str = "/v1/filters/{filter}/keys";
/// One key: `GET`/`HEAD` look it up, `PUT` stores it, `DELETE` deletes it.
pub const KEY: &str = "/v1/filters/{filter}/keys/{key}";
/// A batch of lookups (`POST`).
pub const LOOKUPS: &str = "/v1/filters/{filter}/lookups";
/// What the edge needs to answer for a filter (`GET`, edge secret).
pub const MANIFEST: &str = "/v1/filters/{filter}/manifest";
/// One segment of a generation's bits (`GET`, edge secret).
pub const SEGMENT: &str = "/v1/filters/{filter}/segments/{generation}/{index}";
/// A generation's insert journal after a position (`GET ?after=&after_id=`, edge secret).
pub const JOURNAL: &str = "/v1/filters/{filter}/journal/{generation}";
/// A page of a sealed chunk of a generation's insert journal, the chunk `chunk` of `width_ms`
/// ms of Redis's clock (`GET`; the path token of `crate::feed_token`, no header): immutable,
/// one URL for every isolate, so shared caches serve it.
pub const SEALED_PAGE: &str = "/v1/feed/{token}/{filter}/{generation}/chunks/{width_ms}/{chunk}/{page}";
/// Segment `index` of a generation at epoch `epoch`, a sealed chunk of `width_ms` (`GET`; the
/// path token): bits holding every write up to the chunk's end, the same URL for every isolate;
/// the edge brings it forward with the chunks after the epoch.
pub const EPOCH_SEGMENT: &str = "/v1/feed/{token}/{filter}/{generation}/segments/{width_ms}/{epoch}/{index}";
/// The filter's current document for its feed in chunks of `width_ms`, slot `slot` (`GET`;
/// the path token of generation 0): what an isolate needs at a cold start.
pub const FEED_CURRENT: &str = "/v1/feed/{token}/{filter}/current/{width_ms}/{slot}";
/// What an edge isolate holds and has done (`GET`, edge secret; the edge only): see
/// [`crate::api::IsolateReport`]. Outside `/v1/`: it is about one isolate, not the API.
pub const ISOLATE: &str = "/_bloomgate/isolate";
/// The process is up (`GET`; origin and edge).
pub const HEALTHZ: &str = "/healthz";
/// Both stores answer (`GET`; origin).
pub const READYZ: &str = "/readyz";
/// Prometheus metrics (`GET`; origin).
pub const METRICS: &str = "/metrics";
/// The API's OpenAPI description (`GET`; origin).
pub const OPENAPI: &str = "/openapi.json";

/// Percent-escapes everything but RFC 3986's unreserved characters, so `value` travels as one
/// path segment and is decoded back to itself.
pub fn escape_segment(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for byte in value.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// `pattern` with its `{param}`s replaced, in order, by `values`, each escaped as one segment.
/// Extra values are ignored; a pattern with more parameters than values keeps the rest as is.
pub fn fill(pattern: &str, values: &[&str]) -> String {
    let mut values = values.iter();
    let filled: Vec<String> = pattern
        .split('/')
        .map(|segment| match (is_param(segment), segment) {
            (true, _) => values.next().map_or_else(|| segment.to_owned(), |v| escape_segment(v)),
            (false, literal) => literal.to_owned(),
        })
        .collect();
    filled.join("/")
}

fn is_param(segment: &str) -> bool {
    segment.len() > 2 && segment.starts_with('{') && segment.ends_with('}')
}

/// The parameters of `path` if it has `pattern`'s shape: as many segments, the same literal
/// ones. Parameter values are returned as written (still percent-encoded) and may be empty.
pub fn matches<'a>(pattern: &str, path: &'a str) -> Option<Vec<&'a str>> {
    let (mut want, mut got) = (pattern.split('/'), path.split('/'));
    let mut params = Vec::new();
    loop {
        match (want.next(), got.next()) {
            (None, None) => return Some(params),
            (Some(w), Some(g)) if is_param(w) => params.push(g),
            (Some(w), Some(g)) if w == g => {}
            _ => return None,
        }
    }
}

/// [`FILTER`] for `filter`.
pub fn filter(filter: &str) -> String {
    fill(FILTER, &[filter])
}

/// [`STATS`] for `filter`.
pub fn stats(filter: &str) -> String {
    fill(STATS, &[filter])
}

/// [`REBUILD`] for `filter`.
pub fn rebuild(filter: &str) -> String {
    fill(REBUILD, &[filter])
}

/// [`KEYS`] for `filter`.
pub fn keys(filter: &str) -> String {
    fill(KEYS, &[filter])
}

/// [`KEY`] for `filter` and `key` (escaped: see the module doc).
pub fn key(filter: &str, key: &str) -> String {
    fill(KEY, &[filter, key])
}

/// [`LOOKUPS`] for `filter`.
pub fn lookups(filter: &str) -> String {
    fill(LOOKUPS, &[filter])
}

/// [`MANIFEST`] for `filter`.
pub fn manifest(filter: &str) -> String {
    fill(MANIFEST, &[filter])
}

/// [`SEGMENT`] for segment `index` of `generation`.
pub fn segment(filter: &str, generation: u64, index: u32) -> String {
    fill(SEGMENT, &[filter, &generation.to_string(), &index.to_string()])
}

/// [`SEGMENT`] as the edge asks for it under `manifest`, with a query naming what the copy must
/// at least be: current to the journal head (`?at=`), or at the listed version (`?v=`). Whatever
/// the origin answers for it is at least that forever (positions and versions only grow within a
/// generation), so any cache on the way may keep it. None for an index the generation does not
/// have.
pub fn segment_of(manifest: &Manifest, index: u32) -> Option<String> {
    if index >= manifest.params.segment_count {
        return None;
    }
    let path = segment(&manifest.filter, manifest.generation, index);
    Some(match manifest.journal {
        Some(head) => format!("{path}?at={}", head.added),
        None => format!("{path}?v={}", manifest.segment_version(index)?),
    })
}

/// [`JOURNAL`] of `generation`, with the query asking for the entries after `after`.
pub fn journal(filter: &str, generation: u64, after: &JournalPosition) -> String {
    let path = fill(JOURNAL, &[filter, &generation.to_string()]);
    format!("{path}?after={}&after_id={}", after.added, after.stream_id())
}

/// [`SEALED_PAGE`]: page `page` of chunk `chunk` (chunks of `width_ms`) of `filter`'s
/// generation `generation`, under its path `token`.
pub fn sealed_page(token: &str, filter: &str, generation: u64, width_ms: u64, chunk: u64, page: u32) -> String {
    let numbers = [generation.to_string(), width_ms.to_string(), chunk.to_string(), page.to_string()];
    fill(SEALED_PAGE, &[token, filter, &numbers[0], &numbers[1], &numbers[2], &numbers[3]])
}

/// [`EPOCH_SEGMENT`]: segment `index` of `filter`'s generation `generation` at epoch `epoch`
/// (chunks of `width_ms`), under its path `token`.
pub fn epoch_segment(token: &str, filter: &str, generation: u64, width_ms: u64, epoch: u64, index: u32) -> String {
    let numbers = [generation.to_string(), width_ms.to_string(), epoch.to_string(), index.to_string()];
    fill(EPOCH_SEGMENT, &[token, filter, &numbers[0], &numbers[1], &numbers[2], &numbers[3]])
}

/// [`FEED_CURRENT`] of `filter` for slot `slot`, under the filter's path `token`.
pub fn feed_current(token: &str, filter: &str, width_ms: u64, slot: u64) -> String {
    fill(FEED_CURRENT, &[token, filter, &width_ms.to_string(), &slot.to_string()])
}

/// The query of [`JOURNAL`]: where the edge's copies are.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JournalQuery {
    /// Entries added at the position.
    pub after: u64,
    /// Its stream id, `ms-seq`.
    pub after_id: String,
}

impl JournalQuery {
    /// The position asked about; None when `after_id` is not `MS-SEQ`.
    pub fn position(&self) -> Option<JournalPosition> {
        let (ms, seq) = self.after_id.split_once('-')?;
        Some(JournalPosition { added: self.after, id_ms: ms.parse().ok()?, id_seq: seq.parse().ok()? })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builders_fill_the_patterns_the_router_uses() {
        assert_eq!(filter("users"), "/v1/filters/users");
        assert_eq!(stats("users"), "/v1/filters/users/stats");
        assert_eq!(key("f", "a/b c%d?é"), "/v1/filters/f/keys/a%2Fb%20c%25d%3F%C3%A9");
        assert_eq!(lookups("f"), "/v1/filters/f/lookups");
        assert_eq!(segment("f", 9, 2), "/v1/filters/f/segments/9/2");
        let at = JournalPosition { added: 40, id_ms: 1_700_000_000_040, id_seq: 1 };
        assert_eq!(journal("f", 9, &at), "/v1/filters/f/journal/9?after=40&after_id=1700000000040-1");
    }

    #[test]
    fn segment_paths_name_generation_and_version() {
        let params = bloomgate_filter::Params::new(1, 6, 0, 3).unwrap();
        let manifest = Manifest {
            format: bloomgate_filter::MANIFEST_FORMAT,
            filter: "hashes".into(),
            key_format: bloomgate_filter::KeyFormat::SHA256_HEX,
            generation: 2,
            params,
            segment_versions: vec![1, 5, 9],
            journal: None,
        };
        assert_eq!(segment_of(&manifest, 2).unwrap(), "/v1/filters/hashes/segments/2/2?v=9");
        assert_eq!(segment_of(&manifest, 3), None);
        let head = JournalPosition { added: 41, id_ms: 1_700_000_000_000, id_seq: 0 };
        let slim = Manifest { segment_versions: vec![], journal: Some(head), ..manifest };
        assert_eq!(segment_of(&slim, 2).unwrap(), "/v1/filters/hashes/segments/2/2?at=41");
        assert_eq!(segment_of(&slim, 3), None);
    }

    #[test]
    fn every_built_path_matches_its_pattern_and_gives_its_values_back() {
        let built = [
            (FILTER, filter("f")),
            (STATS, stats("f")),
            (REBUILD, rebuild("f")),
            (KEYS, keys("f")),
            (KEY, key("f", "k")),
            (LOOKUPS, lookups("f")),
            (MANIFEST, manifest("f")),
            (SEGMENT, segment("f", 1, 2)),
        ];
        for (pattern, path) in &built {
            let params = matches(pattern, path).unwrap_or_else(|| panic!("{path} does not match {pattern}"));
            assert_eq!(params.first(), Some(&"f"), "{path}");
            for (other, _) in built.iter().filter(|(other, _)| other != pattern) {
                assert!(matches(other, path).is_none(), "{path} also matches {other}");
            }
        }
        assert_eq!(matches(KEY, "/v1/filters/f/keys/a%2Fb"), Some(vec!["f", "a%2Fb"]));
        assert_eq!(matches(KEY, "/v1/filters/f/keys/"), Some(vec!["f", ""]), "empty values are the caller's to refuse");
        assert_eq!(matches(KEY, "/v1/filters/f/keys/a/b"), None, "a key is one segment");
        assert_eq!(matches(HEALTHZ, "/healthz"), Some(vec![]));
    }

    #[test]
    fn a_sealed_page_path_names_every_part() {
        let path = sealed_page("ab12", "users", 17, 250, 7_060_000, 2);
        assert_eq!(path, "/v1/feed/ab12/users/17/chunks/250/7060000/2");
        assert_eq!(matches(SEALED_PAGE, &path), Some(vec!["ab12", "users", "17", "250", "7060000", "2"]));
        let path = epoch_segment("ab12", "users", 17, 250, 7_060_000, 3);
        assert_eq!(path, "/v1/feed/ab12/users/17/segments/250/7060000/3");
        assert!(matches(SEALED_PAGE, &path).is_none() && matches(EPOCH_SEGMENT, &path).is_some());
        let path = feed_current("ab12", "users", 250, 176_500_000);
        assert_eq!(path, "/v1/feed/ab12/users/current/250/176500000");
        assert_eq!(matches(FEED_CURRENT, &path), Some(vec!["ab12", "users", "250", "176500000"]));
    }

    #[test]
    fn patterns_use_the_routers_parameter_syntax() {
        for pattern in [FILTER, STATS, REBUILD, KEYS, KEY, LOOKUPS, MANIFEST, SEGMENT, JOURNAL] {
            assert!(pattern.starts_with(FILTERS), "{pattern}");
            assert!(!pattern.contains(':') && !pattern.contains('*'), "axum 0.8 writes parameters as {{name}}");
        }
    }

    #[test]
    fn journal_queries_read_back_their_position() {
        let at = JournalPosition { added: 3, id_ms: 17, id_seq: 2 };
        let query = JournalQuery { after: 3, after_id: at.stream_id() };
        assert_eq!(query.position(), Some(at));
        assert_eq!(JournalQuery { after: 3, after_id: "17".into() }.position(), None);
    }
}
