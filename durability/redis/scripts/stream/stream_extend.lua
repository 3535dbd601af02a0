-- Keep a delivery from being reclaimed a while longer, if it is still the receipt's.
-- KEYS[1] = {ns}:ready
-- ARGV[1] = group   ARGV[2] = entry id   ARGV[3] = delivery count   ARGV[4] = consumer
-- ARGV[5] = the idle time (ms) to set: the lease minus the time asked for
--
-- Redis counts idleness from the last delivery and refuses a delivery time in the future, so
-- the furthest an entry can be pushed is "delivered just now": one lease of protection.
local held = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[2], ARGV[2], 1)
if #held == 0 or held[1][4] ~= tonumber(ARGV[3]) then
  return 0
end
-- Never shorten: only move the idle clock back, never forward.
if held[1][3] > tonumber(ARGV[5]) then
  -- JUSTID leaves the delivery count (and so the receipt) as it is.
  redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[4], 0, ARGV[2], 'IDLE', ARGV[5], 'JUSTID')
end
return 1
