-- ARGV: ttl_ms. Returns {how many records went, the raised token}.
-- The claim hash stays, with its token raised and its times cleared: a pass still running is
-- refused at its next write, and the next claim is stamped above every token handed out so far.
local gone = redis.call('HLEN', KEYS[1])
redis.call('DEL', KEYS[1], KEYS[3])
local held = claim_state()
local token = math.max(now, held + 1)
redis.call('HSET', KEYS[2], 'token', token, 'until', 0, 'deadline', 0)
rearm(tonumber(ARGV[1]))
return {gone, token}
