-- ARGV: token, alive_ms, ttl_ms, key, encoded value.
-- Returns {1} if this write won, {0, held} if the key was already recorded, {-1|-2} if fenced.
local why = refused(ARGV[1])
if why then return {why} end
stretch(tonumber(ARGV[2]))
local first = write(ARGV[4], ARGV[5])
rearm(tonumber(ARGV[3]))
if first then return {1} end
return {0, redis.call('HGET', KEYS[1], ARGV[4])}
