-- Starts a generation's journal with one entry, so it exists (appends never create it).
--
-- KEYS: [1] the journal.
-- ARGV: none.
-- Returns 1.
if redis.call('XLEN', KEYS[1]) == 0 then redis.call('XADD', KEYS[1], '*', 'init', 1) end
return 1
