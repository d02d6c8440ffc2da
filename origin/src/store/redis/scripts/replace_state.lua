-- Replaces the filter state if its revision is still the one expected: the compare-and-set
-- every state change goes through. A state of a format newer than the writer reads is never
-- replaced: the writer would drop what it does not know (an origin of an older version,
-- mid-upgrade).
--
-- KEYS: [1] the filter's `meta`.
-- ARGV: [1] the revision expected (-1: only if there is no state), [2] the new state (JSON),
--       [3] the newest state format the writer reads.
-- Returns 1 if replaced, 0 if someone changed it first, minus the stored format if that is
-- newer than ARGV[3].
local current = redis.call('GET', KEYS[1])
local expected = tonumber(ARGV[1])
if current == false then
  if expected ~= -1 then return 0 end
else
  local decoded = cjson.decode(current)
  local format = decoded['format']
  if type(format) ~= 'number' then format = 1 end
  if format > tonumber(ARGV[3]) then return -format end
  if expected == -1 then return 0 end
  local revision = decoded['revision']
  if type(revision) ~= 'number' then revision = 0 end
  if revision ~= expected then return 0 end
end
redis.call('SET', KEYS[1], ARGV[2])
return 1
