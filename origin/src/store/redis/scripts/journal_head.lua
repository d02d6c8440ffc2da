-- The journal's head: the position of its last entry, and its length.
--
-- KEYS: [1] the journal.
-- ARGV: none.
-- Returns {1, entries-added, last-generated-id, length}, or {0} if the journal is missing.
if redis.call('TYPE', KEYS[1])['ok'] ~= 'stream' then return {0} end
local info = redis.call('XINFO', 'STREAM', KEYS[1])
local f = {}
for i = 1, #info, 2 do f[info[i]] = info[i + 1] end
return {1, f['entries-added'], f['last-generated-id'], f['length']}
