-- The members visible now (score at or below the server's time: ready, not taken), at every
-- priority and parked for a limit's room, and how long ago the earliest became visible.
-- KEYS[1] = {ns}:schedule.   Returns {count, age in ms or false}.
-- include: policy
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local S = KEYS[1]
local ready, earliest = 0, false
local function count(key, oldest)
  ready = ready + redis.call('ZCOUNT', key, '(-inf', now)  -- not set_take.lua's flag
  if oldest and (not earliest or oldest < earliest) then earliest = oldest end
end
for _, p in ipairs(levels_of(S)) do
  local key = level_key(S, p)
  local first = redis.call('ZRANGEBYSCORE', key, '(-inf', '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
  count(key, first[2] and tonumber(first[2]) <= now and math.floor(tonumber(first[2])))
end
for _, k in ipairs(redis.call('ZRANGE', S .. ':parked', 0, -1)) do
  local parked = redis.call('ZRANGE', S .. ':parked:' .. k, 0, -1, 'WITHSCORES')
  ready = ready + #parked / 2
  for i = 2, #parked, 2 do
    local made = tonumber(parked[i]) % BAND
    if not earliest or made < earliest then earliest = made end
  end
end
if ready == 0 or not earliest then return {ready, false} end
return {ready, math.max(now - earliest, 0)}
