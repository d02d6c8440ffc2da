-- A segment's version (on a cluster: a plain GET could not refuse a promoted replica).
--
-- KEYS: [1] the segment's `ver`.
-- ARGV: none.
-- Returns the version, or false when missing.
return redis.call('GET', KEYS[1])
