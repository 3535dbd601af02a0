-- Schedule a delivery's workflow for a later pass, unless it was cancelled meanwhile.
-- KEYS[1] = {ns}:schedule   ARGV[1] = workflow   ARGV[2] = receipt   ARGV[3] = when, Unix ms
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
end
return 1
