-- Take the workflow that has been visible longest: hide it for one lease and hand out the
-- score it now has as the receipt.
-- KEYS[1] = {ns}:schedule   ARGV[1] = lease in ms
-- Returns {workflow, receipt} or nil when nothing is visible.
--
-- One script, because reading the lowest member and moving it in two round trips would hand
-- the same member to two workers.
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local first = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, 1)
if #first == 0 then
  return false
end
-- The .5 marks the score as a receipt (see set_make_ready.lua).
local receipt = string.format('%.1f', now + tonumber(ARGV[1]) + 0.5)
redis.call('ZADD', KEYS[1], receipt, first[1])
return {first[1], receipt}
