-- Acknowledge a delivery, but only if it is still the one the receipt names.
-- KEYS[1] = {ns}:ready   ARGV[1] = group   ARGV[2] = entry id   ARGV[3] = delivery count
-- ARGV[4] = the delivery's policy, ARGV[5] = workflow, ARGV[6] = lease ms (absent: default;
-- '' with ARGV[5] alone: a plain delivery on a shard of a sharded queue)
--
-- The delivery count is part of the receipt because XACK alone does not care who holds an
-- entry: a worker that stalled past its lease and was reclaimed would otherwise acknowledge the
-- entry its successor is still running, and the successor's wake_at would then decline.
-- A delivery under a concurrency limit gives its slot back, and the parked wakeups that fit
-- are appended again (which wakes a blocked reader, as an arrival does).
if not ARGV[4] or ARGV[4] == '' then
  -- The common path, before the policy piece's functions are made (they are, every run).
  local held = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[2], ARGV[2], 1)
  if #held == 0 or held[1][4] ~= tonumber(ARGV[3]) then
    return 0
  end
  -- A shard of a sharded queue indexes a plain wakeup (stream_policy.lua): the index goes too.
  if ARGV[5] and redis.call('HGET', KEYS[1] .. ':plain', ARGV[5]) == ARGV[2] then
    redis.call('HDEL', KEYS[1] .. ':plain', ARGV[5])
  end
  return redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
end
-- include: stream_policy
local R = KEYS[1]
local p, k, n, per = policy_of(ARGV[4])
local key = level_key(R, p)
local held = redis.call('XPENDING', key, ARGV[1], ARGV[2], ARGV[2], 1)
if #held == 0 or held[1][4] ~= tonumber(ARGV[3]) then
  return 0
end
local acked = redis.call('XACK', key, ARGV[1], ARGV[2])
if ARGV[4] and ARGV[4] ~= '' then
  local at = where_of(redis.call('HGET', R .. ':policy', ARGV[5]))
  if at == ARGV[2] then redis.call('HDEL', R .. ':policy', ARGV[5]) end
end
if k then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local till = now + tonumber(ARGV[6])
  release(R, k, n, per, holder(ARGV[4], ARGV[2]), now, stream_put_back(R, now, till), till)
end
return acked
