-- Move every sleeper due by now into the stream; return the earliest score still sleeping,
-- and the queue's marker (see marker.py), read here so the check costs no round trip.
-- KEYS[1] = {ns}:ready   KEYS[2] = {ns}:sleeping   KEYS[3] = {ns}:marker
-- ARGV[1] = now in Unix ms, or '' for the server's clock   ARGV[2] = most to move in one call
-- ARGV[3] = a fresh marker   ARGV[4] = group   ARGV[5] = lease in ms
-- ARGV[6] = '1' on a shard of a sharded queue: plain wakeups are indexed (stream_policy.lua)
-- Returns {earliest score or false, marker}.
--
-- One script, so a sleeper is never both gone from the set and missing from the stream. A
-- sleeper kept with a policy ({ns}:sleeping:policy) wakes under it (stream_policy.lua), and a
-- limit whose room may have come by now (a holder's lease lapsed, a rate window moved) puts
-- back what it parked; the earliest such moment counts as a sleeper's.
-- include: stream_policy
if ARGV[6] == '1' then keep_plain() end
local marker = redis.call('GET', KEYS[3])
if not marker then
  -- The data set was wiped (or this queue never prepared): make the queue usable again, the
  -- group included, so the workers find it there; the new marker tells the others.
  redis.pcall('XGROUP', 'CREATE', KEYS[1], ARGV[4], '0', 'MKSTREAM')
  redis.call('SET', KEYS[3], ARGV[3])
  marker = ARGV[3]
end
local now
if ARGV[1] ~= '' then
  now = tonumber(ARGV[1])
else
  local clock = redis.call('TIME')
  now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
end
local due = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, tonumber(ARGV[2]))
local kept = #due > 0 and redis.call('EXISTS', KEYS[2] .. ':policy') == 1
for _, workflow in ipairs(due) do
  if workflow ~= PARKED then  -- the parked wakeups' stand-in: see below
    local policy = ''
    if kept then
      policy = redis.call('HGET', KEYS[2] .. ':policy', workflow) or ''
      if policy ~= '' then redis.call('HDEL', KEYS[2] .. ':policy', workflow) end
    end
    queue(KEYS[1], workflow, policy)
  end
  redis.call('ZREM', KEYS[2], workflow)
end
local parked = false
if redis.call('EXISTS', KEYS[1] .. ':parked') == 1 then
  -- The server's clock, never a caller's `now`: a lease counts as lapsed only when it has.
  local t = redis.call('TIME')
  local server = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local till = server + tonumber(ARGV[5] or '0')
  parked = unpark_due(KEYS[1], server, stream_put_back(KEYS[1], server, till), till)
end
-- A score at or below now here means the batch was full: the caller comes back at once.
if parked then redis.call('ZADD', KEYS[2], parked, PARKED) end
local first = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
local earliest = first[2] and tonumber(first[2]) or false
if not earliest then
  return {false, marker}
end
return {string.format('%d', earliest), marker}
