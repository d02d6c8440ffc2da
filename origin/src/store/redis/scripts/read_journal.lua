-- Reads the journal after a position, with what decides whether the caller's position is still
-- covered (entries trimmed past it, or a position that is not this journal's).
--
-- KEYS: [1] the journal.
-- ARGV: [1] the stream id of the caller's position, [2] entries at most, [3] 1 when the
--       position was read from this very journal (a local copy), else 0.
-- Returns {1, max-deleted-entry-id, entries-added, last-generated-id, entries, time}; {0} if
-- the journal is missing; with ARGV[3] = 1, {2, time} when the newest entry is the caller's:
-- nothing to read, without the costlier XINFO (the read barrier's usual answer, made once per
-- round trip). `time` is Redis's clock as it read ({seconds, microseconds}, `TIME`): a local
-- copy checks its own clock against it (`lease::clock_check`).
if redis.call('TYPE', KEYS[1])['ok'] ~= 'stream' then return {0} end
local time = redis.call('TIME')
if ARGV[3] == '1' then
  local newest = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)
  if newest[1] ~= nil and newest[1][1] == ARGV[1] then return {2, time} end
end
local info = redis.call('XINFO', 'STREAM', KEYS[1])
local f = {}
for i = 1, #info, 2 do f[info[i]] = info[i + 1] end
local entries = redis.call('XRANGE', KEYS[1], '(' .. ARGV[1], '+', 'COUNT', ARGV[2])
return {1, f['max-deleted-entry-id'], f['entries-added'], f['last-generated-id'], entries, time}
