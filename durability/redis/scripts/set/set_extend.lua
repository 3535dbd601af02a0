-- Hide a held workflow for longer, if the receipt is still its score; return the new receipt.
-- KEYS[1] = {ns}:schedule   ARGV[1] = workflow   ARGV[2] = receipt   ARGV[3] = within, ms
-- Returns nil if the receipt is dead (done, cancelled, woken, or taken by another worker).
local held = redis.call('ZSCORE', KEYS[1], ARGV[1])
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
redis.call('ZADD', KEYS[1], receipt, ARGV[1])
return receipt
