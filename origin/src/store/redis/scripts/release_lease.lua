-- Releases the filter's rebuild lease, only if the owner holds it.
--
-- KEYS: [1] the filter's `lease`.
-- ARGV: [1] the owner.
-- Returns 0.
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
return 0
