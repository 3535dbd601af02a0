-- Schedule a delivery's workflow for a later pass, unless it was cancelled meanwhile.
-- KEYS[1] = {ns}:schedule   KEYS[2] = {ns}:doorbell (absent: no doorbell)
-- ARGV[1] = workflow   ARGV[2] = receipt   ARGV[3] = when, Unix ms
-- ARGV[4] = the delivery's policy (policy.lua; absent: priority 0, no limit)
-- ARGV[5] = lease in ms (with a policy)
-- Returns 0 (and writes nothing) if the member is gone, else 1.
--
-- The sleeper keeps the delivery's policy (it comes back as it went); a wakeup that landed
-- mid-pass merges with it. A delivery under a concurrency limit gives its slot back.
-- include: policy
-- include: set_release
local S, workflow, when = KEYS[1], ARGV[1], tonumber(ARGV[3])
local theirs = ARGV[4] or ''
local current = false
if theirs ~= '' or redis.call('EXISTS', S .. ':policy') == 1 then
  current = redis.call('HGET', S .. ':policy', workflow)
end
local from, k0 = policy_of(current)
local rang = false
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local held = redis.call('ZSCORE', level_key(S, from), workflow)
local woken = 1
if not held then
  -- Parked by a take while this pass ran (a wakeup that landed mid-pass, over the limit): it
  -- is ready, so it comes first; only the slot goes back. Else the member is gone (cancelled):
  -- decline, and still give the slot back (it is counted under this delivery's receipt).
  if not (k0 and redis.call('ZSCORE', S .. ':parked:' .. k0, workflow)) then
    woken = 0
  end
else
  local score = tonumber(held)
  if score == tonumber(ARGV[2]) or when < score then
    -- Our own receipt is replaced outright; anything else (a wakeup that landed mid-pass, a
    -- newer holder) keeps whichever comes first.
    local policy = theirs
    if score ~= tonumber(ARGV[2]) then policy = merged(current, theirs) end
    local to = policy_of(policy)
    if to ~= from then redis.call('ZREM', level_key(S, from), workflow) end
    redis.call('ZADD', level_key(S, to), when, workflow)
    note_level(S, to)
    if policy ~= '' then
      redis.call('ZADD', S, '-inf', IN_USE)  -- see set_take.lua
      redis.call('HSET', S .. ':policy', workflow, policy)
    elseif current then
      redis.call('HDEL', S .. ':policy', workflow)
    end
    -- A reader waiting for the earliest hidden member must hear of an earlier one: ring if
    -- this member is now due, or due before every other hidden one of its level.
    local first = redis.call(
      'ZRANGEBYSCORE', level_key(S, to), '(' .. string.format('%d', now), '+inf', 'LIMIT', 0, 1)
    rang = when <= now or first[1] == workflow
  end
end
local _, k, n, per = policy_of(theirs)
if k then
  rang = set_release(S, k, n, per, ARGV[2], now, tonumber(ARGV[5])) or rang
end
if rang then ring(KEYS[2]) end
return woken
