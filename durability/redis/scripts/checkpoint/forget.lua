-- Drop the standings of workflows whose checkpoints have gone (expired past their ttl), each
-- only if it is still the one seen gone: a standing since written under a newer claim (the id
-- used again) stays. KEYS as settle.lua's. ARGV: id, token, id, token, ...
-- Returns how many were dropped.
local dropped = 0
for i = 1, #ARGV, 2 do
  local held = redis.call('HGET', KEYS[1], ARGV[i])
  if held and string.match(held, '^(%d+)') == ARGV[i + 1] then
    redis.call('HDEL', KEYS[1], ARGV[i])
    for k = 2, #KEYS do redis.call('ZREM', KEYS[k], ARGV[i]) end
    dropped = dropped + 1
  end
end
return dropped
