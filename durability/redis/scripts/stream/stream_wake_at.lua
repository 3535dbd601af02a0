-- Put a delivery's workflow to sleep until a moment, unless it was cancelled meanwhile.
-- KEYS[1] = {ns}:ready   KEYS[2] = {ns}:sleeping
-- ARGV[1] = group   ARGV[2] = entry id   ARGV[3] = delivery count   ARGV[4] = workflow
-- ARGV[5] = when, Unix ms
--
-- One script: cancel removes the entry from the pending list, so "still pending" is the test
-- for "not cancelled", and reading it then writing the sleeper in two round trips would let a
-- cancel land between them and leave a wakeup for a workflow whose records are gone.
local held = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[2], ARGV[2], 1)
if #held == 0 or held[1][4] ~= tonumber(ARGV[3]) then
  return 0
end
-- LT keeps the earlier of an existing and the new deadline (and adds a missing member).
redis.call('ZADD', KEYS[2], 'LT', ARGV[5], ARGV[4])
return 1
