-- Reads a chunk of a generation's journal by time (the entries whose ids' milliseconds lie in
-- [start, end)), sealing it first when Redis's clock is past its end but no entry is: an empty
-- entry is appended, whose id is then at or past the end, so no later add can land in the
-- chunk (stream ids only grow). Never seals across a recorded step back of the clock (see
-- `add.lua` and `bloomgate_filter::sealed_chunk::seal`, which decides the same from the reply).
--
-- KEYS: [1] the journal, [2] its clock-step record.
-- ARGV: [1] the chunk's start, ms, [2] its end, ms, [3] 1 to read its entries, 0 to seal only.
-- Returns {1, time, last-generated-id, max-deleted-entry-id, step from, step to, entries,
-- whole} (step fields '' when none is recorded; entries only once sealed; whole: 1 when no
-- entry at or after the chunk's start was ever trimmed: the journal lost none at all, or an
-- entry before the chunk is still kept, trimming taking the oldest entries first); {0} if the
-- journal is missing; {2} if it was retired.
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind == 'string' and redis.call('GET', KEYS[1]) == 'retired' then return {2} end
if kind ~= 'stream' then return {0} end
local time = redis.call('TIME')
local now_ms = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local start_ms, end_ms = tonumber(ARGV[1]), tonumber(ARGV[2])
local info = redis.call('XINFO', 'STREAM', KEYS[1])
local f = {}
for i = 1, #info, 2 do f[info[i]] = info[i + 1] end
local last = f['last-generated-id']
local last_ms = tonumber(string.match(last, '^(%d+)'))
local from = redis.call('HGET', KEYS[2], 'from')
local to = redis.call('HGET', KEYS[2], 'to')
-- A step record of a format this release does not know (1, or absent: 1) is never guessed at:
-- it is read as a step across every chunk, so none is sealed.
local format = redis.call('HGET', KEYS[2], 'format')
if format ~= false and format ~= '1' then from, to = '0', '18446744073709551615' end
local stepped = from and to and tonumber(from) < end_ms and end_ms <= tonumber(to)
if not stepped and last_ms < end_ms and now_ms >= end_ms then
  last = redis.call('XADD', KEYS[1], '*', 'h', '')
  last_ms = tonumber(string.match(last, '^(%d+)'))
end
local entries = {}
if ARGV[3] == '1' and not stepped and last_ms >= end_ms then
  entries = redis.call('XRANGE', KEYS[1], start_ms .. '-0', (end_ms - 1) .. '-18446744073709551615')
end
local whole = 0
if f['entries-added'] == f['length'] or #redis.call('XREVRANGE', KEYS[1], '(' .. start_ms .. '-0', '-', 'COUNT', 1) > 0 then
  whole = 1
end
return {1, time, last, f['max-deleted-entry-id'], from or '', to or '', entries, whole}
