-- Whether a workflow has a wakeup with a limit waiting here (queued and not yet handed out, or
-- parked): a sharded queue's limited make_ready merges into it (sharded.py).
-- KEYS[1] = {ns}:ready   ARGV[1] = workflow   Returns 1 or 0.
-- include: stream_policy
local R = KEYS[1]
local at, pending = where_of(redis.call('HGET', R .. ':policy', ARGV[1]))
local p, k = policy_of(pending)
if not at or not k then return 0 end
if at == 'parked' or undelivered(level_key(R, p), at) then return 1 end
return 0
