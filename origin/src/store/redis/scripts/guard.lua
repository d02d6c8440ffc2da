-- The incarnation guard, prepended to every script (see cluster.rs and link.rs): the script
-- runs only on a Redis process, with the replication history, its generation was created on,
-- checked atomically with its work (`INFO` is read inside the script).
--
-- KEYS: the script's own.
-- ARGV: the script's own, then the identities (`run_id:master_replid`) the caller accepts, then
--       their count (0 = any process: calls that name no generation).
-- Returns an error reply `BGINCARNATION ...` on any other process or history; else the script
-- runs on, with `guard_me` (this process's identity) and `guard_replicas` (the replicas
-- connected to it) set when the guard checked (else '' and 0).
local guard_n = tonumber(ARGV[#ARGV])
local guard_me, guard_replicas = '', 0
if guard_n > 0 then
  local replication = redis.call('INFO', 'replication')
  local run_id = string.match(redis.call('INFO', 'server'), 'run_id:(%x+)') or ''
  guard_me = run_id .. ':' .. (string.match(replication, 'master_replid:(%x+)') or '')
  guard_replicas = tonumber(string.match(replication, 'connected_slaves:(%d+)')) or 0
  local known = false
  for i = #ARGV - guard_n, #ARGV - 1 do
    if ARGV[i] == guard_me then known = true end
  end
  if not known then return redis.error_reply('BGINCARNATION this Redis process or its history is not the generation\'s') end
end
