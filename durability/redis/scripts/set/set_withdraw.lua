-- Take back a workflow's waiting wakeup (ready or asleep; never one a pass holds): a sharded
-- queue's limited make_ready, whose wakeup lives on the limit key's shard, merges the one left
-- on the workflow's own shard this way (sharded.py).
-- KEYS[1] = {ns}:schedule   ARGV[1] = workflow
-- Returns the priority the withdrawn wakeup had, or false if none was waiting.
-- include: policy
local S, workflow = KEYS[1], ARGV[1]
local current = redis.call('HGET', S .. ':policy', workflow)
local p, k = policy_of(current)
if k then return false end  -- a limited wakeup: it is on its limit's shard, not merged here
local score = redis.call('ZSCORE', level_key(S, p), workflow)
if not score or tonumber(score) % 1 ~= 0 then return false end  -- none, or held (a receipt)
redis.call('ZREM', level_key(S, p), workflow)
if current then redis.call('HDEL', S .. ':policy', workflow) end
return p
