-- Returns {1 if a live claim holds the workflow else 0, 1 if it has any record else 0,
-- 1 if its claim hash exists else 0}. With neither records nor claim hash the checkpoint has
-- expired (its ttl) or never existed, and a standing that names it is stale.
local _, live_until, deadline = claim_state()
local claimed = 0
if now < live_until and now < deadline then claimed = 1 end
return {claimed, redis.call('EXISTS', KEYS[1]), redis.call('EXISTS', KEYS[2])}
