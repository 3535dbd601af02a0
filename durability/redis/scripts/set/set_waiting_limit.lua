-- Whether a workflow has a wakeup with a limit waiting here (ready, asleep or parked; not one
-- a pass holds): a sharded queue's limited make_ready merges into it (sharded.py).
-- KEYS[1] = {ns}:schedule   ARGV[1] = workflow   Returns 1 or 0.
-- include: policy
local S, workflow = KEYS[1], ARGV[1]
local p, k = policy_of(redis.call('HGET', S .. ':policy', workflow))
if not k then return 0 end
if redis.call('ZSCORE', S .. ':parked:' .. k, workflow) then return 1 end
local score = redis.call('ZSCORE', level_key(S, p), workflow)
if score and tonumber(score) % 1 == 0 then return 1 end
return 0
