-- Deletes a key unless it is a retirement marker (those expire on their own).
--
-- KEYS: [1] the key.
-- ARGV: none.
-- Returns the number of keys deleted (0 or 1).
if redis.call('TYPE', KEYS[1])['ok'] == 'string' and redis.call('GET', KEYS[1]) == 'retired' then return 0 end
return redis.call('DEL', KEYS[1])
