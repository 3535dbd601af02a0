-- Schedule a delivery's workflow for a later pass, unless it was cancelled meanwhile.
-- KEYS[1] = {ns}:schedule   KEYS[2] = {ns}:doorbell (absent: no doorbell)
-- ARGV[1] = workflow   ARGV[2] = receipt   ARGV[3] = when, Unix ms
-- Returns 0 (and writes nothing) if the member is gone, else 1.
local held = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not held then
  return 0
end
local score = tonumber(held)
local when = tonumber(ARGV[3])
if score == tonumber(ARGV[2]) or when < score then
  -- Our own receipt is replaced outright; anything else (a wakeup that landed mid-pass, a
  -- newer holder) keeps whichever comes first.
  redis.call('ZADD', KEYS[1], when, ARGV[1])
  if KEYS[2] then
    -- A reader waiting for the earliest hidden member must hear of an earlier one: ring if
    -- this member is now due, or due before every other hidden one.
    local clock = redis.call('TIME')
    local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
    local first = redis.call(
      'ZRANGEBYSCORE', KEYS[1], '(' .. string.format('%d', now), '+inf', 'LIMIT', 0, 1)
    if when <= now or first[1] == ARGV[1] then
      redis.call('LPUSH', KEYS[2], 1)
      redis.call('LTRIM', KEYS[2], 0, 63)
    end
  end
end
return 1
