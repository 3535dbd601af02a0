-- Move every sleeper due by now into the stream; return the earliest score still sleeping,
-- and the queue's marker (see marker.py), read here so the check costs no round trip.
-- KEYS[1] = {ns}:ready   KEYS[2] = {ns}:sleeping   KEYS[3] = {ns}:marker
-- ARGV[1] = now in Unix ms, or '' for the server's clock   ARGV[2] = most to move in one call
-- ARGV[3] = a fresh marker   ARGV[4] = group
-- Returns {earliest score or false, marker}.
--
-- One script, so a sleeper is never both gone from the set and missing from the stream.
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
for _, workflow in ipairs(due) do
  redis.call('XADD', KEYS[1], '*', 'workflow', workflow)
  redis.call('ZREM', KEYS[2], workflow)
end
-- A score at or below now here means the batch was full: the caller comes back at once.
local first = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
if #first == 0 then
  return {false, marker}
end
return {first[2], marker}
