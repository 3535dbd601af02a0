-- Take the workflow that has been visible longest: hide it for one lease and hand out the
-- score it now has as the receipt.
-- KEYS[1] = {ns}:schedule   KEYS[2] = {ns}:doorbell and KEYS[3] = {ns}:marker (both absent:
-- no doorbell)   ARGV[1] = lease in ms   ARGV[2] = a fresh marker (with the doorbell)
-- Returns {workflow, receipt, 1 if that member's lease had lapsed (a held member's score is a
-- receipt, with a fraction: see set_make_ready.lua) else 0}, or when nothing is visible {false,
-- ms until the earliest hidden member shows (a sleeper's deadline or a lease running out), or
-- false if there is none, and with the doorbell the queue's marker (see marker.py)}.
--
-- One script, because reading the lowest member and moving it in two round trips would hand
-- the same member to two workers. An idle reader runs it once a wait (a ring, or a lease at
-- the longest): the lowest member alone says whether anything is visible and when the first
-- hidden one shows, and the clock is only read when there is a member to compare.
local function nothing(hidden_ms)
  if not KEYS[2] then
    return {false, hidden_ms}
  end
  -- Every ring still on the doorbell announced a change this look has seen: clear them, or a
  -- reader about to wait would wake at once for nothing. And read the marker, which the
  -- reader's worker then need not look at while it waits (the timer's wake_due asks nothing).
  redis.call('DEL', KEYS[2])
  local marker = redis.call('GET', KEYS[3])
  if not marker then
    -- The data set was wiped (or this queue never prepared); the new marker tells the others.
    redis.call('SET', KEYS[3], ARGV[2])
    marker = ARGV[2]
  end
  return {false, hidden_ms, marker}
end

local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if #first == 0 then
  return nothing(false)
end
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local score = tonumber(first[2])
if score > now then
  return nothing(tostring(score - now))
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
if score % 1 ~= 0 then
  lapsed = 1  -- a receipt still in place: its pass neither answered nor renewed in time
end
return {first[1], receipt, lapsed}
