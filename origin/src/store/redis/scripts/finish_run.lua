-- Marks a rebuild's run done on its board, and releases the builder's claim on it.
--
-- KEYS: [1] the generation's `runs` board, [2] the run's `run` claim.
-- ARGV: [1] the run's `done:<index>` field, [2] the keys its scan read, [3] the builder.
-- Returns 1 if marked, 0 if the board is gone (its rebuild switched or gave up, or Redis lost
-- it): a board is never recreated without its plan.
local marked = 0
if redis.call('EXISTS', KEYS[1]) == 1 then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
  marked = 1
end
if redis.call('GET', KEYS[2]) == ARGV[3] then redis.call('DEL', KEYS[2]) end
return marked
