-- The earliest moment a sleeping workflow becomes visible, after `now`, and the queue's marker
-- (see marker.py), read here so the check costs no round trip.
-- KEYS[1] = {ns}:schedule   KEYS[2] = {ns}:marker   KEYS[3] = {ns}:doorbell (absent: none)
-- ARGV[1] = now in Unix ms, or '' for the server's clock   ARGV[2] = a fresh marker
-- Returns {that score or false if nothing sleeps, marker}.
--
-- Being due and being ready are the same score here, so there is nothing to move, except when
-- a caller passes a `now` ahead of the server's clock (a test that skips time): sleepers due
-- by then are pulled to the server's now so next_ready sees them. Every priority's set is
-- looked at (policy.lua).
-- include: policy
local marker = redis.call('GET', KEYS[2])
if not marker then
  -- The data set was wiped (or this queue never prepared); the new marker tells the others.
  redis.call('SET', KEYS[2], ARGV[2])
  marker = ARGV[2]
end
local clock = redis.call('TIME')
local server = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local now = server
if ARGV[1] ~= '' then
  now = tonumber(ARGV[1])
end
local S = KEYS[1]
local levels = {0}
if redis.call('EXISTS', S .. ':levels') == 1 then levels = levels_of(S) end
local earliest = false
for _, p in ipairs(levels) do
local key = level_key(S, p)
if now > server then
  local due = redis.call('ZRANGEBYSCORE', key, '(' .. string.format('%d', server), now, 'WITHSCORES')
  for i = 1, #due, 2 do
    -- Whole scores only: a fractional one is a pass's receipt, not a sleeper.
    if tonumber(due[i + 1]) % 1 == 0 then
      redis.call('ZADD', key, server, due[i])
      if KEYS[3] then
        redis.call('LPUSH', KEYS[3], 1)
        redis.call('LTRIM', KEYS[3], 0, 63)
      end
    end
  end
end
-- Skip held members: their score is a lease running out, not a wakeup.
local offset = 0
while true do
  local batch = redis.call(
    'ZRANGEBYSCORE', key, '(' .. string.format('%d', now), '+inf', 'WITHSCORES',
    'LIMIT', offset, 64)
  if #batch == 0 then
    break
  end
  local found = false
  for i = 2, #batch, 2 do
    if tonumber(batch[i]) % 1 == 0 then
      found = tonumber(batch[i])
      break
    end
  end
  if found then
    if not earliest or found < earliest then earliest = found end
    break
  end
  offset = offset + 64
end
end
if not earliest then return {false, marker} end
return {string.format('%d', earliest), marker}
