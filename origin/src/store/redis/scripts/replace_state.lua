-- Replaces the filter state if its revision is still the one expected: the compare-and-set
-- every state change goes through.
--
-- KEYS: [1] the filter's `meta`.
-- ARGV: [1] the revision expected (-1: only if there is no state), [2] the new state (JSON).
-- Returns 1 if replaced, 0 if someone changed it first.
local current = redis.call('GET', KEYS[1])
local expected = tonumber(ARGV[1])
if current == false then
  if expected ~= -1 then return 0 end
else
  if expected == -1 then return 0 end
  local revision = cjson.decode(current)['revision']
  if type(revision) ~= 'number' then revision = 0 end
  if revision ~= expected then return 0 end
end
redis.call('SET', KEYS[1], ARGV[2])
return 1
