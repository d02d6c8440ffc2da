-- A segment's size and version, read together (on a cluster, where a pipeline cannot span
-- slots and a plain read could not refuse a promoted replica).
--
-- KEYS: [1] the segment's `bits`, [2] its `ver`.
-- ARGV: none.
-- Returns {length of the bits, version (false when missing)}.
return {redis.call('STRLEN', KEYS[1]), redis.call('GET', KEYS[2])}
