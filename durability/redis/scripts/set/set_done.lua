-- Remove a workflow only if its score is still the receipt its pass took.
-- KEYS[1] = {ns}:schedule   ARGV[1] = workflow   ARGV[2] = receipt
-- Any later make_ready or wake_at wrote a different score, and that wakeup must survive.
local held = redis.call('ZSCORE', KEYS[1], ARGV[1])
if held and tonumber(held) == tonumber(ARGV[2]) then
  return redis.call('ZREM', KEYS[1], ARGV[1])
end
return 0
