-- The entry a blocking read just gave the waiting consumer, handed to the worker's own
-- consumer, as a script body for `durable.py`: it is sent in one pipeline right behind that
-- `XREADGROUP ... BLOCK`, so Redis runs it the moment the read is served, and the claim in
-- the same script goes with it: a woken worker starts its pass without a second round trip.
-- KEYS[1] = {ns}:ready   ARGV[1] = group   ARGV[2] = the worker's consumer
-- ARGV[3] = the waiting consumer   ARGV[4] = the workflow field   ARGV[5] = lease in ms
-- Returns {workflow, entry id, policy, levels} as stream_take.lua does, or {false, levels}
-- when the read found nothing, a `nudge` (a level made new: the caller reads again, on every
-- level), or an entry over its limit (parked: see stream_policy.lua).
-- include: stream_policy
local R = KEYS[1]
local keys, levels = {R}, ''
if redis.call('EXISTS', R .. ':levels') == 1 then
  keys = level_keys(R)
  levels = table.concat(redis.call('ZREVRANGE', R .. ':levels', 0, -1), ',')
end
for _, key in ipairs(keys) do
  local pending = redis.call('XPENDING', key, ARGV[1], '-', '+', 1, ARGV[3])
  if #pending > 0 then
    local id = pending[1][1]
    -- JUSTID: a hand-over inside one worker is not a new delivery; the count stays 1.
    redis.call('XCLAIM', key, ARGV[1], ARGV[2], 0, id, 'JUSTID')
    local entries = redis.call('XRANGE', key, id, id)
    if #entries == 0 then
      return {false, levels}
    end
    local fields, workflow, policy = entries[1][2], false, ''
    for i = 1, #fields, 2 do
      if fields[i] == ARGV[4] then workflow = fields[i + 1] end
      if fields[i] == 'policy' then policy = fields[i + 1] end
      if fields[i] == 'nudge' then
        redis.call('XACK', key, ARGV[1], id)
        redis.call('XDEL', key, id)
        return {false, levels}
      end
    end
    -- An entry without a workflow stays pending, as when the client reads it: `reclaiming`
    -- finds it.
    if not workflow then return {false, levels} end
    if policy ~= '' then
      local t = redis.call('TIME')
      local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
      if not admit(R, key, id, workflow, policy, tonumber(ARGV[5]), now) then
        return {false, levels}
      end
    end
    return {workflow, id, policy, levels}
  end
end
return {false, levels}
