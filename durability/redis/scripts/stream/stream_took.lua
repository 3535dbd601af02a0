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
-- include: stream_policy
local R = KEYS[1]
local keys, levels, room_ms = {R}, '', -1
if redis.call('EXISTS', R .. ':levels') == 1 then
  keys = level_keys(R)
  levels = table.concat(redis.call('ZREVRANGE', R .. ':levels', 0, -1), ',')
end
local now = false
local function clock()  -- read only when a limit is in play: the common path does not
  if not now then
    local t = redis.call('TIME')
    now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  return now
end
local parked = redis.call('EXISTS', R .. ':parked') == 1
if parked then
  unpark_due(R, clock(), stream_put_back(R), clock() + tonumber(ARGV[5]))
end
-- Nothing handed over: and when a limit's parked wakeups may have room (-1: none parked).
local function nothing()
  if parked or now then
    local next = redis.call('ZRANGE', R .. ':parked', 0, 0, 'WITHSCORES')
    if next[2] then room_ms = math.max(tonumber(next[2]) - clock(), 0) end
  end
  return {false, levels, room_ms}
end
for _, key in ipairs(keys) do
  local pending = redis.call('XPENDING', key, ARGV[1], '-', '+', 1, ARGV[3])
  if #pending > 0 then
    local id = pending[1][1]
    -- JUSTID: a hand-over inside one worker is not a new delivery; the count stays 1.
    redis.call('XCLAIM', key, ARGV[1], ARGV[2], 0, id, 'JUSTID')
    local entries = redis.call('XRANGE', key, id, id)
    if #entries == 0 then
      return nothing()
    end
    local fields, workflow, policy = entries[1][2], false, ''
    for i = 1, #fields, 2 do
      if fields[i] == ARGV[4] then workflow = fields[i + 1] end
      if fields[i] == 'policy' then policy = fields[i + 1] end
      if fields[i] == 'nudge' then
        redis.call('XACK', key, ARGV[1], id)
        redis.call('XDEL', key, id)
        return nothing()
      end
    end
    -- An entry without a workflow stays pending, as when the client reads it: `reclaiming`
    -- finds it.
    if not workflow then return nothing() end
    if policy ~= '' then
      if not admit(R, key, id, workflow, policy, tonumber(ARGV[5]), clock()) then
        return nothing()
      end
    end
    return {workflow, id, policy, levels}
  end
end
return nothing()
