-- Take the workflow of the highest priority that has been visible longest: hide it for one
-- lease and hand out the score it now has as the receipt.
-- KEYS[1] = {ns}:schedule   KEYS[2] = {ns}:doorbell and KEYS[3] = {ns}:marker (both absent:
-- no doorbell)   ARGV[1] = lease in ms   ARGV[2] = a fresh marker (with the doorbell)
-- Returns {workflow, receipt, 1 if that member's lease had lapsed (a held member's score is a
-- receipt, with a fraction: see set_make_ready.lua) else 0, and if it has one its policy (see
-- policy.lua)}, or when nothing is visible {false, ms until the earliest hidden member shows (a
-- sleeper's deadline, a lease running out, a limit's room), or false if there is none, and
-- with the doorbell the queue's marker (see marker.py)}.
--
-- One script, because reading the lowest member and moving it in two round trips would hand
-- the same member to two workers, and counting a limit's holders apart from the take would let
-- two takers both see the last slot free. With no policy anywhere in the queue (every wakeup at
-- priority 0, no limit) it reads the one set as it did before priorities: a queue with one has
-- the member '{policies}' scored -inf in {ns}:schedule (no workflow id holds a brace), so the
-- first member says which path to take, at no cost to the common one.
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

local S = KEYS[1]
local lease = tonumber(ARGV[1])
local clock, now, fraction

local function read_clock()
  clock = redis.call('TIME')
  now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
  -- A fraction marks the score as a receipt (see set_make_ready.lua), and it is this take's
  -- microsecond within the millisecond (offset by half, so never whole): a member taken, woken
  -- and taken again within one millisecond still gets a receipt of its own each time, so the
  -- first pass's done cannot delete what the second take holds. (Scripts run one at a time and
  -- last longer than a microsecond; a double near 1.8e12 tells apart steps of 1/4096 ms.)
  fraction = (tonumber(clock[2]) % 1000 + 0.5) / 1000
end

local function took(key, workflow, score)
  local receipt = string.format('%.4f', now + lease + fraction)
  redis.call('ZADD', key, receipt, workflow)
  local lapsed = 0
  if score % 1 ~= 0 then
    lapsed = 1  -- a receipt still in place: its pass neither answered nor renewed in time
  end
  return receipt, lapsed
end

local first = redis.call('ZRANGE', S, 0, 0, 'WITHSCORES')
if first[1] ~= '{policies}' then  -- policy.lua's IN_USE
  -- The common path: one set, no limits. The lowest member alone says whether anything is
  -- visible and when the first hidden one shows; the clock is read only when there is one.
  if #first == 0 then
    return nothing(false)
  end
  read_clock()
  local score = tonumber(first[2])
  if score > now then
    return nothing(tostring(score - now))
  end
  local receipt, lapsed = took(S, first[1], score)
  return {first[1], receipt, lapsed}
end

-- The policy piece only now: its functions are made on every run that reaches it.
-- include: policy
read_clock()
if redis.call('EXISTS', S .. ':policy', S .. ':levels', S .. ':parked') == 0 then
  redis.call('ZREM', S, IN_USE)  -- no policy left: the next look takes the common path
end
local function ready_again(workflow, p, ready)
  redis.call('ZADD', level_key(S, p), ready, workflow)
  note_level(S, p)
end
local hidden = unpark_due(S, now, ready_again, now + lease)
if hidden then hidden = math.max(hidden, now + 1) end
-- At most a few limited wakeups parked per look, so one look stays short: past that it says
-- "look again now", and the next look goes on where this one stopped.
local parked = 0
for _, p in ipairs(levels_of(S)) do
  local key = level_key(S, p)
  while true do
    if parked == 32 then return nothing('0') end
    local first = redis.call('ZRANGEBYSCORE', key, '(-inf', '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
    if #first == 0 then
      if p ~= 0 then redis.call('ZREM', S .. ':levels', p) end
      break
    end
    local score = tonumber(first[2])
    if score > now then
      if not hidden or score < hidden then hidden = score end
      break
    end
    local workflow = first[1]
    local policy = redis.call('HGET', S .. ':policy', workflow)
    local _, k, n, per = policy_of(policy)
    local free, when = 1, false
    if k then free, when = room(S, k, n, per, now) end
    if free > 0 then
      local receipt, lapsed = took(key, workflow, score)
      if k then hold(S, k, per, receipt, math.floor(now + lease), now) end
      return {workflow, receipt, lapsed, policy or ''}
    end
    -- Over its limit: it waits off the level, so the wakeups behind it are taken.
    redis.call('ZREM', key, workflow)
    park(S, k, workflow, p, score, when)
    parked = parked + 1
    if not hidden or when < hidden then hidden = when end
  end
end
if hidden then
  return nothing(tostring(math.max(math.ceil(hidden - now), 0)))
end
return nothing(false)
