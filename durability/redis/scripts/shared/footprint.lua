-- How big a queue is: each key's length and the bytes Redis says it takes, in one round trip.
-- KEYS = the queue's keys (one hash tag, so one slot); ARGV[i] = how KEYS[i] is counted:
-- 'stream' (XLEN), 'zset' (ZCARD) or 'list' (LLEN).
-- Returns {length, bytes, length, bytes, ...}, one pair per key (0, 0 for a missing key).
local counts = {stream = 'XLEN', zset = 'ZCARD', list = 'LLEN'}
local out = {}
for i, name in ipairs(KEYS) do
  if redis.call('EXISTS', name) == 1 then
    out[#out + 1] = redis.call(counts[ARGV[i]], name)
    out[#out + 1] = redis.call('MEMORY', 'USAGE', name) or 0
  else
    out[#out + 1] = 0
    out[#out + 1] = 0
  end
end
return out
