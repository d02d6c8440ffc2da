-- A segment's version (a plain GET could not refuse another process or history).
--
-- KEYS: [1] the segment's `ver`.
-- ARGV: none.
-- Returns the version, or false when missing.
return redis.call('GET', KEYS[1])
