-- Returns {1 if a live claim holds the workflow else 0, 1 if it has any record else 0}.
local _, live_until, deadline = claim_state()
local claimed = 0
if now < live_until and now < deadline then claimed = 1 end
return {claimed, redis.call('EXISTS', KEYS[1])}
