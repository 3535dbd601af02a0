-- ARGV: key, encoded value, ttl_ms. Returns {1} if this write won, else {0, held}.
local first = write(ARGV[1], ARGV[2])
rearm(tonumber(ARGV[3]))
if first then return {1} end
return {0, redis.call('HGET', KEYS[1], ARGV[1])}
