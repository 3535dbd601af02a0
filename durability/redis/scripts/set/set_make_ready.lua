-- Make a workflow visible now, without ever landing on a receipt a pass is holding.
-- KEYS[1] = {ns}:schedule   KEYS[2] = {ns}:doorbell (absent: no doorbell)   ARGV[1] = workflow
--
-- Scores are whole milliseconds, except a receipt (next_ready's now + lease), which has a
-- fraction (the taking script's microsecond, never zero).
-- So a fractional score means a pass holds (or held) the member, and moving it to any whole
-- score changes the receipt: that pass's done then compares unequal and leaves the wakeup.
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local held = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not held then
  redis.call('ZADD', KEYS[1], now, ARGV[1])
else
  local score = tonumber(held)
  if score % 1 ~= 0 then
    -- Held: step off the receipt, visible now (or keep its place if its lease already lapsed).
    redis.call('ZADD', KEYS[1], math.min(now, math.floor(score)), ARGV[1])
  elseif score > now then
    -- Asleep: wake it now. A score at or before now is already ready and keeps its place.
    redis.call('ZADD', KEYS[1], now, ARGV[1])
  end
end
-- Ring: one waiting reader's BLPOP returns (see sortedset.py). Kept short: with nobody
-- waiting, the rings pile up only until the next empty take clears them.
if KEYS[2] then
  redis.call('LPUSH', KEYS[2], 1)
  redis.call('LTRIM', KEYS[2], 0, 63)
end
return 1
