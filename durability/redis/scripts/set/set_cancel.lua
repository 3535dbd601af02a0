-- Remove a workflow's wakeup, wherever its policy put it (its priority's set, or parked).
-- KEYS[1] = {ns}:schedule   ARGV[1] = workflow
-- Returns how many went (0 or 1).
-- include: policy
local S, workflow = KEYS[1], ARGV[1]
if redis.call('EXISTS', S .. ':policy') == 0 then
  return redis.call('ZREM', S, workflow)
end
local current = redis.call('HGET', S .. ':policy', workflow)
redis.call('HDEL', S .. ':policy', workflow)
local p, k = policy_of(current)
local gone = redis.call('ZREM', level_key(S, p), workflow)
if k then gone = gone + redis.call('ZREM', S .. ':parked:' .. k, workflow) end
return gone
