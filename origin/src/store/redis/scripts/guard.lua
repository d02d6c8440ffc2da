-- The incarnation guard, prepended to every script on a Redis Cluster (see cluster.rs): the
-- script runs only on a Redis process its generation was created on, checked atomically with
-- its work (`INFO server` is read inside the script).
--
-- KEYS: the script's own.
-- ARGV: the script's own, then the `run_id`s the caller accepts, then their count (0 = any
--       process: calls that name no generation).
-- Returns an error reply `BGINCARNATION ...` on any other process; else the script runs on.
local guard_n = tonumber(ARGV[#ARGV])
if guard_n > 0 then
  local me = string.match(redis.call('INFO', 'server'), 'run_id:(%x+)')
  local known = false
  for i = #ARGV - guard_n, #ARGV - 1 do
    if ARGV[i] == me then known = true end
  end
  if not known then return redis.error_reply('BGINCARNATION this Redis process did not hold the generation') end
end
