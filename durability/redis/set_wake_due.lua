-- The earliest moment a sleeping workflow becomes visible, after `now`.
-- KEYS[1] = {ns}:schedule   KEYS[2] = {ns}:doorbell (absent: no doorbell)
-- ARGV[1] = now in Unix ms, or '' for the server's clock
-- Returns that score, or nil if nothing sleeps.
--
-- Being due and being ready are the same score here, so there is nothing to move, except when
-- a caller passes a `now` ahead of the server's clock (a test that skips time): sleepers due
-- by then are pulled to the server's now so next_ready sees them.
local clock = redis.call('TIME')
local server = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local now = server
if ARGV[1] ~= '' then
  now = tonumber(ARGV[1])
end
if now > server then
  local due = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. string.format('%d', server), now, 'WITHSCORES')
  for i = 1, #due, 2 do
    -- Whole scores only: a fractional one is a pass's receipt, not a sleeper.
    if tonumber(due[i + 1]) % 1 == 0 then
      redis.call('ZADD', KEYS[1], server, due[i])
      if KEYS[2] then
        redis.call('LPUSH', KEYS[2], 1)
        redis.call('LTRIM', KEYS[2], 0, 63)
      end
    end
  end
end
-- Skip held members: their score is a lease running out, not a wakeup.
local offset = 0
while true do
  local batch = redis.call(
    'ZRANGEBYSCORE', KEYS[1], '(' .. string.format('%d', now), '+inf', 'WITHSCORES',
    'LIMIT', offset, 64)
  if #batch == 0 then
    return false
  end
  for i = 2, #batch, 2 do
    if tonumber(batch[i]) % 1 == 0 then
      return batch[i]
    end
  end
  offset = offset + 64
end
