-- ORs an uploaded payload into a segment (keeping bits set by concurrent adds) and bumps its
-- version, only if the segment exists and is neither retired nor lost.
--
-- KEYS: [1] the segment's `bits`, [2] its `ver`, [3] a scratch key in the same slot (`upload`).
-- ARGV: [1] the payload.
-- Returns the new version, or -1 when the segment is not there to merge into.
local ver = redis.call('GET', KEYS[2])
if ver == false or ver == 'retired' or ver == 'lost' or redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
redis.call('SET', KEYS[3], ARGV[1])
redis.call('BITOP', 'OR', KEYS[1], KEYS[1], KEYS[3])
redis.call('DEL', KEYS[3])
return redis.call('INCR', KEYS[2])
