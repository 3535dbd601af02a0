-- Take back a workflow's wakeups without a limit still waiting on this stream (not yet handed
-- out): a sharded queue's limited make_ready, whose wakeup lives on the limit key's shard,
-- merges the ones left on the workflow's own shard this way (sharded.py).
-- KEYS[1] = {ns}:ready   ARGV[1] = workflow   ARGV[2] = the workflow field
-- Returns the highest priority withdrawn, or false if none was found.
--
-- A prioritized wakeup is found by its record (R:policy); a default one keeps none, so only
-- the first SCAN waiting entries of the default level are looked through: past a backlog that
-- long it stays, and runs as one more pass (the claim still runs one pass at a time).
-- include: stream_policy
local SCAN = 100
local R, workflow = KEYS[1], ARGV[1]
local found = false
local at, pending = where_of(redis.call('HGET', R .. ':policy', workflow))
local p, k = policy_of(pending)
if at and at ~= 'parked' and not k and undelivered(level_key(R, p), at) then
  redis.call('XDEL', level_key(R, p), at)
  redis.call('HDEL', R .. ':policy', workflow)
  found = p
end
local last = false
if redis.call('EXISTS', R) == 1 then
  for _, group in ipairs(redis.call('XINFO', 'GROUPS', R)) do
    local name, id
    for i = 1, #group, 2 do
      if group[i] == 'name' then name = group[i + 1] end
      if group[i] == 'last-delivered-id' then id = group[i + 1] end
    end
    if name == GROUP then last = id end
  end
end
if last then
  for _, entry in ipairs(redis.call('XRANGE', R, '(' .. last, '+', 'COUNT', SCAN)) do
    local fields = entry[2]
    for i = 1, #fields, 2 do
      if fields[i] == ARGV[2] and fields[i + 1] == workflow then
        redis.call('XDEL', R, entry[1])
        if not found or found < 0 then found = 0 end
      end
    end
  end
end
return found
