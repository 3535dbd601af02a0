-- Acknowledge a delivery, but only if it is still the one the receipt names.
-- KEYS[1] = {ns}:ready   ARGV[1] = group   ARGV[2] = entry id   ARGV[3] = delivery count
--
-- The delivery count is part of the receipt because XACK alone does not care who holds an
-- entry: a worker that stalled past its lease and was reclaimed would otherwise acknowledge the
-- entry its successor is still running, and the successor's wake_at would then decline.
local held = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[2], ARGV[2], 1)
if #held == 0 or held[1][4] ~= tonumber(ARGV[3]) then
  return 0
end
return redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
