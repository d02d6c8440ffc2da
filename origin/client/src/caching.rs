//! `Cache-Control`: what a cache between a client and bloomgate may keep, and why.

/// `Cache-Control` of every lookup answer — single (GET and HEAD) and batch, 200 and 404
/// alike, and every error answer to a lookup — at the origin and at the edge: `no-store`.
///
/// No `max-age` is safe, however short:
/// - A 404 is cacheable by default in HTTP (heuristic freshness, RFC 9111 §4.2.2), so without
///   this header a proxy or CDN in front could keep a "not seen" after the key was stored.
///   The origin promises read-your-writes across origins (a key whose write was acknowledged
///   is seen by every lookup after), so its "no" is good for no time at all. The edge answers
///   "no" from a manifest that may be used until `FRESHNESS_SECS` (S) after the edge asked for
///   it, and uses all of that bound itself: a cache keeping its "no" for any max-age > 0 would
///   let a stored key read "not seen" for up to S + max-age, past the documented bound.
/// - A "seen" does not last either: a key deleted, then dropped from the bits by a rebuild,
///   is "not seen"; a kept 200 would go on answering "seen" (and the value) after the delete.
/// - Errors describe a moment: a kept 503 or 429 turns a blip into an outage, a kept 404
///   "no such filter" outlives the filter's creation.
///
/// `no-store` rather than `no-cache`: the answers say which keys exist, so no cache on the
/// way should hold them at all.
pub const LOOKUP: &str = "no-store";

/// `Cache-Control` of a segment the origin serves the edge. A segment's URL names its filter,
/// generation and index, and its ETag the version of its bits; within a generation bits are
/// only ever set, so a copy labelled with a version answers correctly for every key
/// acknowledged before that version, and may be kept as long as anyone likes (the manifest
/// decides when a newer version is needed). Generation numbers are never reused, even by a
/// filter dropped and created again, so a URL never names two bit sets. Private: segments
/// reveal which keys exist.
pub const SEGMENT: &str = "private, max-age=31536000, immutable";

/// `Cache-Control` of manifests and journal chunks: they are what keeps edges fresh (the
/// journal's head moves with every write), so nothing on the way may keep them.
pub const EDGE_FEED: &str = "no-store";

/// `Cache-Control` of the shared feed's answers (a page of a sealed journal chunk, a segment at
/// an epoch). A page of a sealed journal chunk: once sealed, no entry can land in the
/// chunk again (`bloomgate_filter::sealed_chunk`), so its pages never change, and every isolate
/// asks for them by the same URL. Public, so that the CDN's shared and tiered caches serve them:
/// the URL carries the path token (`feed_token`), which only holders of the edge secret can
/// name. What a chunk may answer for is counted from its end, not from when it was fetched, so
/// a copy from any cache, however old, is never too fresh. A segment at an epoch holds every
/// write up to the epoch's end, whichever copy a cache keeps.
pub const SHARED_FEED: &str = "public, max-age=31536000, immutable";

/// `Cache-Control` of the shared feed's current document: shared caches may keep it for the
/// slot its URL names (`bloomgate_filter::feed_current::CURRENT_SLOT_MS`), and no longer. A
/// stale one is never wrong, only slower: freshness counts from chunks.
pub const FEED_CURRENT: &str = "public, max-age=10";
