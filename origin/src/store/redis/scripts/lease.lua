-- Takes the filter's rebuild lease, or extends it for the owner holding it.
--
-- KEYS: [1] the filter's `lease`.
-- ARGV: [1] the owner, [2] the lease's expiry, ms.
-- Returns 1 if the owner holds the lease now, 0 if someone else does.
local holder = redis.call('GET', KEYS[1])
if holder == false or holder == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
return 0
