-- A workflow's ending from outside any pass. ARGV: key, encoded value, ttl_ms, channel.
-- First writer wins; if this write won, the fence is raised as discard raises it (token up,
-- times cleared) with every record kept, and whoever waits for the ending is told on `channel`.
-- Returns {1} if this write won, else {0, held}.
local first = write(ARGV[1], ARGV[2])
if first then
  local held = claim_state()
  redis.call('HSET', KEYS[2], 'token', math.max(now, held + 1), 'until', 0, 'deadline', 0)
end
rearm(tonumber(ARGV[3]))
if first then
  redis.call('PUBLISH', ARGV[4], '1')
  return {1}
end
return {0, redis.call('HGET', KEYS[1], ARGV[1])}
