-- Read one new entry for this consumer without blocking, the highest priority first, as a
-- script body for `durable.py` to run in the same script as the claim of the workflow it names
-- (and as the scheduler's own look).
-- KEYS[1] = {ns}:ready   ARGV[1] = group   ARGV[2] = consumer   ARGV[3] = the workflow field
-- ARGV[4] = lease in ms (for a limit's holders; absent: no limit can be in use)
-- Returns {workflow, entry id, policy ('' for none), levels}, or {false, levels, ms until a
-- limit's parked wakeups may have room (-1: none parked)} when nothing new is there; levels
-- lists the priorities other than 0 in use ('5,-1'), so a reader blocks on every level's
-- stream (see stream_policy.lua), and no longer than until that room may come.
--
-- A limited entry over its limit is parked (see policy.lua) and the look goes on; a `nudge`
-- (a level made new) is acknowledged and dropped. With no level but 0 and nothing parked (one
-- EXISTS), it is the one XREADGROUP it was before priorities.
-- include: stream_policy
local R = KEYS[1]
local lease = tonumber(ARGV[4] or '0')
local general = redis.call('EXISTS', R .. ':levels', R .. ':parked') > 0
local keys, levels, room_ms = {R}, '', -1
local now = false
local function clock()
  if not now then
    local t = redis.call('TIME')
    now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  return now
end
if general then
  keys = level_keys(R)
  levels = table.concat(redis.call('ZREVRANGE', R .. ':levels', 0, -1), ',')
  if redis.call('EXISTS', R .. ':parked') == 1 then
    unpark_due(R, clock(), stream_put_back(R), clock() + lease)
  end
end
local looked = 0
for _, key in ipairs(keys) do
  while looked < 32 do
    looked = looked + 1
    local reply = redis.call('XREADGROUP', 'GROUP', ARGV[1], ARGV[2], 'COUNT', 1,
      'STREAMS', key, '>')
    if not reply then break end
    local entry = reply[1][2][1]
    local fields, workflow, policy, nudge = entry[2], false, '', false
    for i = 1, #fields, 2 do
      if fields[i] == ARGV[3] then workflow = fields[i + 1] end
      if fields[i] == 'policy' then policy = fields[i + 1] end
      if fields[i] == 'nudge' then nudge = true end
    end
    if nudge then
      redis.call('XACK', key, ARGV[1], entry[1])
      redis.call('XDEL', key, entry[1])
    elseif not workflow then
      -- An entry without a workflow stays pending, as when the client reads it: `reclaiming`
      -- finds it.
      return {false, levels, room_ms}
    elseif policy == '' or admit(R, key, entry[1], workflow, policy, lease, clock()) then
      return {workflow, entry[1], policy, levels}
    end
  end
end
-- When a limit's parked wakeups may have room (this look may have parked some).
if general or now then
  local next = redis.call('ZRANGE', R .. ':parked', 0, 0, 'WITHSCORES')
  if next[2] then room_ms = math.max(tonumber(next[2]) - clock(), 0) end
end
return {false, levels, room_ms}
