-- Remove a workflow only if its score is still the receipt its pass took.
-- KEYS[1] = {ns}:schedule   KEYS[2] = {ns}:doorbell (absent: none)
-- ARGV[1] = workflow   ARGV[2] = receipt   ARGV[3] = the delivery's policy (policy.lua;
-- absent: priority 0, no limit)   ARGV[4] = lease in ms (with a policy)
-- Any later make_ready or wake_at wrote a different score, and that wakeup must survive.
-- A delivery under a concurrency limit gives its slot back whatever the score, and the parked
-- wakeups that fit go back (ringing the doorbell, as an arrival does).
-- The common path (no policy) runs before the policy piece is even declared: its functions
-- are made on every run, so one that needs none of them does not pay for them.
if not ARGV[3] then
  local held = redis.call('ZSCORE', KEYS[1], ARGV[1])
  if held and tonumber(held) == tonumber(ARGV[2]) then
    return redis.call('ZREM', KEYS[1], ARGV[1])
  end
  return 0
end
-- include: policy
-- include: set_release
local S, workflow = KEYS[1], ARGV[1]
local p, k, n, per = policy_of(ARGV[3])
local key = level_key(S, p)
local removed = 0
local held = redis.call('ZSCORE', key, workflow)
if held and tonumber(held) == tonumber(ARGV[2]) then
  removed = redis.call('ZREM', key, workflow)
  if ARGV[3] and ARGV[3] ~= '' then redis.call('HDEL', S .. ':policy', workflow) end
end
if k then
  local clock = redis.call('TIME')
  local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
  if set_release(S, k, n, per, ARGV[2], now, tonumber(ARGV[4])) then ring(KEYS[2]) end
end
return removed
