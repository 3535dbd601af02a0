-- Read one new entry for this consumer without blocking, the highest priority first, as a
-- script body for `durable.py` to run in the same script as the claim of the workflow it names
-- (and as the scheduler's own look).
-- KEYS[1] = {ns}:ready   ARGV[1] = group   ARGV[2] = consumer   ARGV[3] = the workflow field
-- ARGV[4] = lease in ms (for a limit's holders; absent: no limit can be in use)
-- Returns {workflow, entry id, policy ('' for none), levels, ms until a limit's parked wakeups
-- may have room (-1: none parked; absent on the common path, where none are)}, or {false,
-- levels, that ms} when nothing new is there; levels
-- lists the priorities other than 0 in use ('5,-1'), so a reader blocks on every level's
-- stream (see stream_policy.lua), and no longer than until that room may come.
--
-- A limited entry over its limit is parked (see policy.lua) and the look goes on; a `nudge`
-- (a level made new) is acknowledged and dropped, and so is a plain entry a later wakeup with a
-- policy superseded (stream_policy.lua). With no level but 0, nothing parked and no wakeup kept
-- with a policy (one EXISTS), it is the one XREADGROUP it was before priorities, run before the policy piece's
-- functions are made (they are, on every run that reaches them).
local R = KEYS[1]
local function fields_of(entry)
  local fields, workflow, policy, nudge = entry[2], false, '', false
  for i = 1, #fields, 2 do
    if fields[i] == ARGV[3] then workflow = fields[i + 1] end
    if fields[i] == 'policy' then policy = fields[i + 1] end
    if fields[i] == 'nudge' then nudge = true end
  end
  return workflow, policy, nudge
end
local ahead = false  -- an entry the common path read whose limit is still to count
if redis.call('EXISTS', R .. ':levels', R .. ':parked', R .. ':policy') == 0 then
  local reply = redis.call('XREADGROUP', 'GROUP', ARGV[1], ARGV[2], 'COUNT', 1,
    'STREAMS', R, '>')
  if not reply then return {false, '', -1} end
  local entry = reply[1][2][1]
  local workflow, policy = fields_of(entry)
  -- An entry without a workflow stays pending, as when the client reads it: `reclaiming`
  -- finds it.
  if not workflow then return {false, '', -1} end
  if policy == '' then return {workflow, entry[1], '', ''} end
  ahead = {entry[1], workflow, policy}
end
-- include: stream_policy
local lease = tonumber(ARGV[4] or '0')
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local keys = level_keys(R)
local levels = table.concat(redis.call('ZREVRANGE', R .. ':levels', 0, -1), ',')
-- When a limit's parked wakeups may have room (this look may have parked some), in ms from
-- now: told with a take too, since a rate window frees by time alone and only a look puts its
-- parked wakeups back, so the reader must look again then even if entries kept it busy.
local function room_in()
  local next = redis.call('ZRANGE', R .. ':parked', 0, 0, 'WITHSCORES')
  if next[2] then return math.max(tonumber(next[2]) - now, 0) end
  return -1
end
local function nothing()
  return {false, levels, room_in()}
end
local function took(workflow, id, policy)
  return {workflow, id, policy, levels, room_in()}
end
if ahead then
  if admit(R, R, ahead[1], ahead[2], ahead[3], lease, now) then
    return took(ahead[2], ahead[1], ahead[3])
  end
elseif redis.call('EXISTS', R .. ':parked') == 1 then
  unpark_due(R, now, stream_put_back(R, now, now + lease), now + lease)
end
local looked = 0
for _, key in ipairs(keys) do
  while looked < 32 do
    looked = looked + 1
    local reply = redis.call('XREADGROUP', 'GROUP', ARGV[1], ARGV[2], 'COUNT', 1,
      'STREAMS', key, '>')
    if not reply then break end
    local entry = reply[1][2][1]
    local workflow, policy, nudge = fields_of(entry)
    if nudge then
      redis.call('XACK', key, ARGV[1], entry[1])
      redis.call('XDEL', key, entry[1])
    elseif not workflow then
      return nothing()
    elseif policy == '' then
      if not superseded(R, key, ARGV[1], entry[1], workflow) then
        return took(workflow, entry[1], policy)
      end
    elseif admit(R, key, entry[1], workflow, policy, lease, now) then
      return took(workflow, entry[1], policy)
    end
  end
end
return nothing()
