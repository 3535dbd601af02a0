-- Remove a workflow's wakeup, wherever its policy put it (its priority's set, or parked). If a
-- pass of it holds a concurrency slot (its member's score is still that take's receipt), the
-- slot goes back now, since that pass's done can no longer answer for it, and the parked
-- wakeups that fit go back, ringing the doorbell as an arrival does.
-- KEYS[1] = {ns}:schedule   KEYS[2] = {ns}:doorbell (absent: none)
-- ARGV[1] = workflow   ARGV[2] = lease in ms
-- Returns how many went (0 or 1).
-- include: policy
-- include: set_release
local S, workflow = KEYS[1], ARGV[1]
if redis.call('EXISTS', S .. ':policy') == 0 then
  return redis.call('ZREM', S, workflow)
end
local current = redis.call('HGET', S .. ':policy', workflow)
redis.call('HDEL', S .. ':policy', workflow)
local p, k, n, per = policy_of(current)
local level = level_key(S, p)
local score = redis.call('ZSCORE', level, workflow)
local gone = redis.call('ZREM', level, workflow)
if k then gone = gone + redis.call('ZREM', S .. ':parked:' .. k, workflow) end
if k and per == 0 and score and tonumber(score) % 1 ~= 0 then
  -- Its hold is named by the receipt as the take wrote it: compared as a number, since the
  -- score Redis gives back need not print as that text did.
  local held = tonumber(score)
  local clock = redis.call('TIME')
  local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
  local rang = false
  for _, receipt in ipairs(redis.call('ZRANGE', S .. ':held:' .. k, 0, -1)) do
    if tonumber(receipt) == held then
      rang = set_release(S, k, n, per, receipt, now, tonumber(ARGV[2])) or rang
    end
  end
  if rang then ring(KEYS[2]) end
end
return gone
