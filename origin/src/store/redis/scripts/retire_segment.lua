-- Makes a segment unreadable while adds to it keep succeeding as no-ops (see add.lua).
--
-- KEYS: [1] the segment's `bits`, [2] its `ver`.
-- ARGV: [1] how long the `retired` marker lives, ms: long after any write that could still
--       name the generation.
-- Returns 1.
redis.call('DEL', KEYS[1])
redis.call('SET', KEYS[2], 'retired', 'PX', ARGV[1])
return 1
