-- How big a queue is: each key's length and the bytes Redis says it takes, in one round trip.
-- KEYS = the queue's keys (one hash tag, so one slot); ARGV[i] = how KEYS[i] is counted:
-- 'stream' (XLEN), 'zset' (ZCARD) or 'list' (LLEN); or 'queue:stream' / 'queue:zset' for a
-- queue's level-0 key Q, counted with every priority level in use (Q:<p>, listed in Q:levels)
-- and the wakeups parked for a limit's room (Q:parked:<k>, listed in Q:parked): policy.lua.
-- Returns {length, bytes, length, bytes, ...}, one pair per key (0, 0 for a missing key).
local counts = {stream = 'XLEN', zset = 'ZCARD', list = 'LLEN'}

local function measured(name, count)
  if redis.call('EXISTS', name) == 0 then return 0, 0 end
  return redis.call(count, name), redis.call('MEMORY', 'USAGE', name) or 0
end

-- A queue: its levels' entries (the set's '{policies}' flag member is no wakeup) and its
-- parked wakeups, with the bytes of every key that holds them.
local function queue(Q, kind)
  local length, bytes = measured(Q, counts[kind])
  if kind == 'zset' and redis.call('ZSCORE', Q, '{policies}') then length = length - 1 end
  for _, p in ipairs(redis.call('ZRANGE', Q .. ':levels', 0, -1)) do
    local n, b = measured(Q .. ':' .. p, counts[kind])
    length, bytes = length + n, bytes + b
  end
  for _, k in ipairs(redis.call('ZRANGE', Q .. ':parked', 0, -1)) do
    local n, b = measured(Q .. ':parked:' .. k, 'ZCARD')
    length, bytes = length + n, bytes + b
  end
  return length, bytes
end

local out = {}
for i, name in ipairs(KEYS) do
  local kind = string.match(ARGV[i], '^queue:(%a+)$')
  local length, bytes
  if kind then
    length, bytes = queue(name, kind)
  else
    length, bytes = measured(name, counts[ARGV[i]])
  end
  out[#out + 1] = length
  out[#out + 1] = bytes
end
return out
