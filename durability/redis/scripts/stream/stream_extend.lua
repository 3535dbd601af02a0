-- Keep a delivery from being reclaimed a while longer, if it is still the receipt's.
-- KEYS[1] = {ns}:ready
-- ARGV[1] = group   ARGV[2] = entry id   ARGV[3] = delivery count   ARGV[4] = consumer
-- ARGV[5] = the idle time (ms) to set: the lease minus the time asked for
-- ARGV[6] = the delivery's policy, ARGV[7] = the lease in ms (absent: the default policy)
--
-- Redis counts idleness from the last delivery and refuses a delivery time in the future, so
-- the furthest an entry can be pushed is "delivered just now": one lease of protection. A
-- holder of a concurrency limit is kept as long.
-- include: policy
local p, k, _, per = policy_of(ARGV[6])
local key = level_key(KEYS[1], p)
local held = redis.call('XPENDING', key, ARGV[1], ARGV[2], ARGV[2], 1)
if #held == 0 or held[1][4] ~= tonumber(ARGV[3]) then
  return 0
end
-- Never shorten: only move the idle clock back, never forward.
if held[1][3] > tonumber(ARGV[5]) then
  -- JUSTID leaves the delivery count (and so the receipt) as it is.
  redis.call('XCLAIM', key, ARGV[1], ARGV[4], 0, ARGV[2], 'IDLE', ARGV[5], 'JUSTID')
  if k and per == 0 then
    local t = redis.call('TIME')
    local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    local ends = now + tonumber(ARGV[7]) - tonumber(ARGV[5])
    local counted = string.format('%d', p) .. '/' .. ARGV[2]  -- as stream_policy.lua's holder
    redis.call('ZADD', KEYS[1] .. ':held:' .. k, 'XX', 'GT', ends, counted)
  end
end
return 1
