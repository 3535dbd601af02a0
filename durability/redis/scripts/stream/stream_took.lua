-- The entry a blocking read just gave the waiting consumer, handed to the worker's own
-- consumer, as a script body for `durable.py`: it is sent in one pipeline right behind that
-- `XREADGROUP ... BLOCK`, so Redis runs it the moment the read is served, and the claim in
-- the same script goes with it: a woken worker starts its pass without a second round trip.
-- KEYS[1] = {ns}:ready   ARGV[1] = group   ARGV[2] = the worker's consumer
-- ARGV[3] = the waiting consumer   ARGV[4] = the workflow field   ARGV[5] = lease in ms
-- Returns {workflow, entry id, policy, levels} as stream_take.lua does, or {false, levels,
-- ms until a limit's parked wakeups may have room (-1: none)} when the read found nothing, a
-- `nudge` (a level made new: the caller reads again, on every level), or an entry over its
-- limit (parked: see stream_policy.lua). Parked wakeups whose room has come are put back
-- first, so the read after this one is served at once.
local R = KEYS[1]
-- The waiter's entry on one level's stream, handed to the worker's consumer: {id, workflow or
-- false, policy, a nudge?}, or false if the waiter holds none there.
local function hand_over(key)
  local pending = redis.call('XPENDING', key, ARGV[1], '-', '+', 1, ARGV[3])
  if #pending == 0 then return false end
  local id = pending[1][1]
  -- JUSTID: a hand-over inside one worker is not a new delivery; the count stays 1.
  redis.call('XCLAIM', key, ARGV[1], ARGV[2], 0, id, 'JUSTID')
  local entries = redis.call('XRANGE', key, id, id)
  if #entries == 0 then return {id, false, '', false} end
  local fields, workflow, policy, nudge = entries[1][2], false, '', false
  for i = 1, #fields, 2 do
    if fields[i] == ARGV[4] then workflow = fields[i + 1] end
    if fields[i] == 'policy' then policy = fields[i + 1] end
    if fields[i] == 'nudge' then nudge = true end
  end
  return {id, workflow, policy, nudge}
end
local ahead = false  -- what the common path handed over whose limit is still to count
if redis.call('EXISTS', R .. ':levels', R .. ':parked', R .. ':policy') == 0 then
  -- The common path, before the policy piece's functions are made (they are, every run).
  local found = hand_over(R)
  -- An entry without a workflow stays pending, as when the client reads it: `reclaiming`
  -- finds it.
  if not found or not found[2] then return {false, '', -1} end
  if found[3] == '' then return {found[2], found[1], '', ''} end
  ahead = found
end
-- include: stream_policy
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lease = tonumber(ARGV[5])
local keys = level_keys(R)
local levels = table.concat(redis.call('ZREVRANGE', R .. ':levels', 0, -1), ',')
if redis.call('EXISTS', R .. ':parked') == 1 then
  unpark_due(R, now, stream_put_back(R, now, now + lease), now + lease)
end
-- Nothing handed over: and when a limit's parked wakeups may have room (-1: none parked).
local function nothing()
  local next = redis.call('ZRANGE', R .. ':parked', 0, 0, 'WITHSCORES')
  if next[2] then return {false, levels, math.max(tonumber(next[2]) - now, 0)} end
  return {false, levels, -1}
end
local found, key = ahead, R
if not found then
  for _, level in ipairs(keys) do
    found, key = hand_over(level), level
    if found then break end
  end
end
if not found or not found[2] then
  if found and found[4] then  -- a nudge: gone; the caller reads again, on every level
    redis.call('XACK', key, ARGV[1], found[1])
    redis.call('XDEL', key, found[1])
  end
  return nothing()
end
if found[3] == '' and superseded(R, key, ARGV[1], found[1], found[2]) then
  return nothing()  -- a later wakeup with a policy stands for it (stream_policy.lua)
end
if found[3] ~= '' and not admit(R, key, found[1], found[2], found[3], lease, now) then
  return nothing()
end
return {found[2], found[1], found[3], levels}
