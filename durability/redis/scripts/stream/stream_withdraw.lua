-- Take back a workflow's wakeups without a limit still waiting on this stream (not yet handed
-- out): a sharded queue's limited make_ready, whose wakeup lives on the limit key's shard,
-- merges the ones left on the workflow's own shard this way (sharded.py).
-- KEYS[1] = {ns}:ready   ARGV[1] = workflow   ARGV[2] = the workflow field
-- Returns the highest priority withdrawn, or false if none was found.
--
-- A prioritized wakeup is found by its record (R:policy), a default one by its index.
-- include: stream_policy
local R, workflow = KEYS[1], ARGV[1]
local found = false
local at, pending = where_of(redis.call('HGET', R .. ':policy', workflow))
local p, k = policy_of(pending)
if at and at ~= 'parked' and not k and undelivered(level_key(R, p), at) then
  redis.call('XDEL', level_key(R, p), at)
  redis.call('HDEL', R .. ':policy', workflow)
  found = p
end
-- A plain one by its index (R:plain: see stream_policy.lua), kept on every shard of a
-- sharded queue: found with one lookup however many entries wait in front of it.
local was = redis.call('HGET', R .. ':plain', workflow)
if was then
  redis.call('HDEL', R .. ':plain', workflow)
  if undelivered(R, was) and redis.call('XDEL', R, was) == 1 then
    if not found or found < 0 then found = 0 end
  end
end
return found
