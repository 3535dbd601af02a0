-- Hide a held workflow for longer, if the receipt is still its score; return the new receipt.
-- KEYS[1] = {ns}:schedule   ARGV[1] = workflow   ARGV[2] = receipt   ARGV[3] = within, ms
-- ARGV[4] = the delivery's policy (policy.lua; absent: priority 0, no limit)
-- Returns nil if the receipt is dead (done, cancelled, woken, or taken by another worker).
-- A holder of a concurrency limit is counted under its receipt, so it moves to the new one.
-- include: policy
local p, k, _, per = policy_of(ARGV[4])
local key = level_key(KEYS[1], p)
local held = redis.call('ZSCORE', key, ARGV[1])
if not held or tonumber(held) ~= tonumber(ARGV[2]) then
  return false
end
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
-- A receipt of its own, as set_take.lua makes one: this script's microsecond as the fraction.
local wanted = now + tonumber(ARGV[3]) + (tonumber(clock[2]) % 1000 + 0.5) / 1000
if wanted <= tonumber(held) then
  return ARGV[2]  -- never shortens
end
local receipt = string.format('%.4f', wanted)
redis.call('ZADD', key, receipt, ARGV[1])
if k and per == 0 then
  local books = KEYS[1] .. ':held:' .. k
  redis.call('ZREM', books, ARGV[2])
  redis.call('ZADD', books, math.floor(wanted), receipt)
end
return receipt
