-- Reads a segment's version and bits in one atomic step, so the bits are never older than the
-- version they are labelled with.
--
-- KEYS: [1] the segment's `bits`, [2] its `ver`.
-- ARGV: none.
-- Returns {version, bits} (either false when missing).
return {redis.call('GET', KEYS[2]), redis.call('GET', KEYS[1])}
