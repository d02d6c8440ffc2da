-- One add, atomically: sets the bits in each touched segment, then appends the hashes to the
-- generation's insert journal (when it has one), so an entry is never seen without its bits
-- and no bits of an acknowledged add are ever missing from the journal.
--
-- KEYS: `bits`, `ver` of each touched segment, then the journal and its clock-step record
--       (if ARGV[1] is 1).
-- ARGV: [1] journal 0/1, [2] the journal's max entries, [3] its max age, ms, [4] the entry
--       (the keys' hashes), then per segment a count n and n bit offsets.
-- Returns {status, replicas, identity}: status 1; 2 when the journal was retired (the
-- generation is unreadable: a harmless no-op, as the bits were); 0 when a journal that should
-- exist is missing (the add must not be acknowledged). Then, from the guard, the replicas
-- connected to the process that ran it and its identity: whom to WAIT for.
--
-- A segment whose version is `retired` or `lost` is skipped: the add changes nothing there and
-- is harmless. One found half gone (bits or version missing: evicted, deleted) is marked lost
-- first (bits deleted, version `lost`) so no reader, origin or edge, can ever use it again; the
-- recovery check rebuilds the generation. It is never re-created as zeros. A changed segment's
-- version is bumped. The journal is never re-created (NOMKSTREAM semantics), so its positions
-- never restart.
local journal = ARGV[1] == '1'
local segments = #KEYS
if journal then segments = segments - 2 end
local at = 5
for s = 1, segments, 2 do
  local bits, ver = KEYS[s], KEYS[s + 1]
  local n = tonumber(ARGV[at])
  local v = redis.call('GET', ver)
  if v == 'retired' or v == 'lost' then
  elseif v == false or redis.call('EXISTS', bits) == 0 then
    redis.call('DEL', bits)
    redis.call('SET', ver, 'lost')
  else
    local changed = 0
    for i = at + 1, at + n do
      if redis.call('SETBIT', bits, ARGV[i], 1) == 0 then changed = 1 end
    end
    if changed == 1 then redis.call('INCR', ver) end
  end
  at = at + n + 1
end
if not journal then return {1, guard_replicas, guard_me} end
local jnl, steps = KEYS[#KEYS - 1], KEYS[#KEYS]
local kind = redis.call('TYPE', jnl)['ok']
if kind == 'string' and redis.call('GET', jnl) == 'retired' then return {2, guard_replicas, guard_me} end
if kind ~= 'stream' then return {0, guard_replicas, guard_me} end
local id = redis.call('XADD', jnl, 'MAXLEN', '~', ARGV[2], '*', 'h', ARGV[4])
-- Aged by Redis's own clock, the clock its entry ids come from: an origin whose clock ran
-- ahead would otherwise trim entries that are not old at all.
local now = redis.call('TIME')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local oldest_kept = now_ms - tonumber(ARGV[3])
if oldest_kept > 0 then redis.call('XTRIM', jnl, 'MINID', '~', oldest_kept) end
-- An id ahead of the clock (read after it was given): Redis's clock stepped back behind the
-- journal's last id. The span [clock, id] is recorded (format 1; absent reads as 1), widened
-- over every such add, for as long as the journal keeps entries: a sealed chunk whose end lies
-- in it could miss this entry (`bloomgate_filter::sealed_chunk::seal`). A record of a format
-- this release does not know is left as it is (`read_sealed_chunk.lua` seals nothing then).
local id_ms = tonumber(string.match(id, '^(%d+)'))
if id_ms > now_ms then
  local format = redis.call('HGET', steps, 'format')
  if format == false or format == '1' then
    local from = tonumber(redis.call('HGET', steps, 'from') or now_ms)
    local to = tonumber(redis.call('HGET', steps, 'to') or id_ms)
    redis.call('HSET', steps, 'format', '1', 'from', math.min(from, now_ms), 'to', math.max(to, id_ms))
    redis.call('PEXPIRE', steps, tonumber(ARGV[3]) + 60000)
  end
end
return {1, guard_replicas, guard_me}
