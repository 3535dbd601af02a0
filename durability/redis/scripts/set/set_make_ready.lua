-- Make a workflow visible now, without ever landing on a receipt a pass is holding.
-- KEYS[1] = {ns}:schedule   KEYS[2] = {ns}:doorbell (absent: no doorbell)   ARGV[1] = workflow
-- ARGV[2] = the wakeup's policy (policy.lua; absent or '': priority 0, no limit)
--
-- Scores are whole milliseconds, except a receipt (next_ready's now + lease), which has a
-- fraction (the taking script's microsecond, never zero).
-- So a fractional score means a pass holds (or held) the member, and moving it to any whole
-- score changes the receipt: that pass's done then compares unequal and leaves the wakeup.
--
-- The member lives in the set of its priority (policy.lua's level_key), as S:policy says. A
-- wakeup on a waiting member (ready, asleep or parked) merges with it: the higher priority,
-- and the limit it had (or this one's). On a held member it is a wakeup of its own: the pass
-- keeps its delivery's policy, and the member takes this one's.
local S, workflow, wanted = KEYS[1], ARGV[1], ARGV[2] or ''
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local function ring()
  -- One waiting reader's BLPOP returns (see set_scheduler.py). Kept short: with nobody
  -- waiting, the rings pile up only until the next empty take clears them.
  if KEYS[2] then
    redis.call('LPUSH', KEYS[2], 1)
    redis.call('LTRIM', KEYS[2], 0, 63)
  end
  return 1
end
if wanted == '' and redis.call('EXISTS', S .. ':policy') == 0 then
  -- The common path, before the policy piece's functions are made: one set, as before.
  local held = redis.call('ZSCORE', S, workflow)
  if not held then
    redis.call('ZADD', S, now, workflow)
  else
    local score = tonumber(held)
    if score % 1 ~= 0 then
      -- Held: step off the receipt, visible now (or keep its place if its lease lapsed).
      redis.call('ZADD', S, math.min(now, math.floor(score)), workflow)
    elseif score > now then
      -- Asleep: wake it now. A score at or before now is already ready and keeps its place.
      redis.call('ZADD', S, now, workflow)
    end
  end
  return ring()
end
-- include: policy
local current = redis.call('HGET', S .. ':policy', workflow)
local from = policy_of(current)
local held = redis.call('ZSCORE', level_key(S, from), workflow)
local policy, score = wanted, now
if not held then
  local _, k = policy_of(current)
  if k and redis.call('ZSCORE', S .. ':parked:' .. k, workflow) then
    -- Parked for room: it stays parked, at the merged priority, in its readiness order.
    policy = merged(current, wanted)
    local order = tonumber(redis.call('ZSCORE', S .. ':parked:' .. k, workflow))
    local ready = order % BAND
    redis.call('ZADD', S .. ':parked:' .. k, (100 - policy_of(policy)) * BAND + ready, workflow)
    redis.call('HSET', S .. ':policy', workflow, policy)
    return ring()
  end
else
  local was = tonumber(held)
  if was % 1 ~= 0 then
    -- Held: step off the receipt, visible now (or keep its place if its lease already lapsed).
    score = math.min(now, math.floor(was))
  else
    policy = merged(current, wanted)
    -- Asleep: wake it now. A score at or before now is already ready and keeps its place.
    score = math.min(now, was)
  end
end
local to = policy_of(policy)
if held and to ~= from then
  redis.call('ZREM', level_key(S, from), workflow)
end
if not held or to ~= from or score ~= tonumber(held) then
  redis.call('ZADD', level_key(S, to), score, workflow)
  note_level(S, to)
end
if policy ~= '' then
  redis.call('ZADD', S, '-inf', IN_USE)  -- see set_take.lua
  redis.call('HSET', S .. ':policy', workflow, policy)
elseif current then
  redis.call('HDEL', S .. ':policy', workflow)
end
return ring()
