-- Creates a zeroed segment and its version (0) unless the segment exists.
--
-- KEYS: [1] the segment's `bits`, [2] its `ver`.
-- ARGV: [1] the segment's size, bytes.
-- Returns the segment's length: its size, unless a segment of another size was there.
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('SETRANGE', KEYS[1], tonumber(ARGV[1]) - 1, '\0')
  redis.call('SET', KEYS[2], 0)
end
return redis.call('STRLEN', KEYS[1])
