-- Replaces a retired generation's journal with a `retired` marker, so appends from writes that
-- still name the generation succeed as no-ops (see add.lua) instead of failing a write whose
-- bits went everywhere they had to.
--
-- KEYS: [1] the journal.
-- ARGV: [1] how long the marker lives, ms.
-- Returns 1.
redis.call('SET', KEYS[1], 'retired', 'PX', ARGV[1])
return 1
