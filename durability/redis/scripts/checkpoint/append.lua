-- ARGV: encoded value, ttl_ms, key prefix, key width. Returns {n, key}.
-- The counter lives in the claim hash, which discard keeps, so a key is not handed out twice
-- while the workflow is remembered; the loop steps over any key already taken regardless.
local n, key
repeat
  n = redis.call('HINCRBY', KEYS[2], 'appended', 1)
  key = string.format('%s%0' .. ARGV[4] .. 'd', ARGV[3], n)
until write(key, ARGV[1])
rearm(tonumber(ARGV[2]))
return {n, key}
