-- ARGV: token, budget_ms, alive_ms, ttl_ms. Returns {1, deadline_ms}, or {-1|-2} if fenced.
-- deadline = max(deadline, now + budget); until = max(until, min(now + alive, deadline)).
local why = refused(ARGV[1])
if why then return {why} end
local _, live_until, deadline = claim_state()
deadline = math.max(deadline, now + tonumber(ARGV[2]))
live_until = math.max(live_until, math.min(now + tonumber(ARGV[3]), deadline))
redis.call('HSET', KEYS[2], 'until', live_until, 'deadline', deadline)
rearm(tonumber(ARGV[4]))
return {1, deadline}
