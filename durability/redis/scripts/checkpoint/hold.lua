-- ARGV: until_ms (or an empty string for "now"), ttl_ms.
-- Keeps the workflow's keys until at least until + ttl: a workflow asleep past its TTL must
-- still be there when it wakes.
local at = tonumber(ARGV[1]) or now
rearm(math.max(at - now, 0) + tonumber(ARGV[2]))
return 1
