-- One block of a segment's bits: a lookup (a plain GETRANGE could not refuse a promoted
-- replica, nor a master demoted and resynchronised since the generation was made).
--
-- KEYS: [1] the segment's `bits`.
-- ARGV: [1] the block's first byte, [2] its last byte.
-- Returns the bytes ("" when the segment is missing).
return redis.call('GETRANGE', KEYS[1], ARGV[1], ARGV[2])
