-- Put a delivery's workflow to sleep until a moment, unless it was cancelled meanwhile.
-- KEYS[1] = {ns}:ready   KEYS[2] = {ns}:sleeping
-- ARGV[1] = group   ARGV[2] = entry id   ARGV[3] = delivery count   ARGV[4] = workflow
-- ARGV[5] = when, Unix ms   ARGV[6] = the delivery's policy, ARGV[7] = lease ms (absent:
-- the default policy)
--
-- One script: cancel removes the entry from the pending list, so "still pending" is the test
-- for "not cancelled", and reading it then writing the sleeper in two round trips would let a
-- cancel land between them and leave a wakeup for a workflow whose records are gone. The
-- sleeper keeps the delivery's policy ({ns}:sleeping:policy), merged with one already asleep;
-- a delivery under a concurrency limit gives its slot back.
-- include: stream_policy
local R = KEYS[1]
local policy = ARGV[6] or ''
local p, k, n, per = policy_of(policy)
local held = redis.call('XPENDING', level_key(R, p), ARGV[1], ARGV[2], ARGV[2], 1)
if #held == 0 or held[1][4] ~= tonumber(ARGV[3]) then
  return 0
end
-- LT keeps the earlier of an existing and the new deadline (and adds a missing member).
redis.call('ZADD', KEYS[2], 'LT', ARGV[5], ARGV[4])
if policy ~= '' then
  local asleep = redis.call('HGET', KEYS[2] .. ':policy', ARGV[4])
  redis.call('HSET', KEYS[2] .. ':policy', ARGV[4], merged(asleep or '', policy))
end
if k then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local till = now + tonumber(ARGV[7])
  release(R, k, n, per, holder(policy, ARGV[2]), now, stream_put_back(R, now, till), till)
end
return 1
