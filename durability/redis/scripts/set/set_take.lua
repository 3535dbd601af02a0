-- Take the workflow that has been visible longest: hide it for one lease and hand out the
-- score it now has as the receipt.
-- KEYS[1] = {ns}:schedule   KEYS[2] = {ns}:doorbell (absent: no doorbell)   ARGV[1] = lease in ms
-- Returns {workflow, receipt, 1 if that member's lease had lapsed (a held member's score is a
-- receipt, with a fraction: see set_make_ready.lua) else 0}, or when nothing is visible {false,
-- ms until the earliest hidden member shows (a sleeper's deadline or a lease running out), or
-- false if there is none}.
--
-- One script, because reading the lowest member and moving it in two round trips would hand
-- the same member to two workers.
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local first = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'WITHSCORES', 'LIMIT', 0, 1)
if #first == 0 then
  -- Nothing visible, so every ring still on the doorbell announced a change this look has
  -- seen: clear them, or a reader about to wait would wake at once for nothing.
  if KEYS[2] then
    redis.call('DEL', KEYS[2])
  end
  local hidden = redis.call(
    'ZRANGEBYSCORE', KEYS[1], '(' .. string.format('%d', now), '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
  if #hidden == 0 then
    return {false, false}
  end
  return {false, tostring(tonumber(hidden[2]) - now)}
end
-- A fraction marks the score as a receipt (see set_make_ready.lua), and it is this take's
-- microsecond within the millisecond (offset by half, so never whole): a member taken, woken
-- and taken again within one millisecond still gets a receipt of its own each time, so the
-- first pass's done cannot delete what the second take holds. (Scripts run one at a time and
-- last longer than a microsecond; a double near 1.8e12 tells apart steps of 1/4096 ms.)
local fraction = (tonumber(clock[2]) % 1000 + 0.5) / 1000
local receipt = string.format('%.4f', now + tonumber(ARGV[1]) + fraction)
redis.call('ZADD', KEYS[1], receipt, first[1])
local lapsed = 0
if tonumber(first[2]) % 1 ~= 0 then
  lapsed = 1  -- a receipt still in place: its pass neither answered nor renewed in time
end
return {first[1], receipt, lapsed}
