-- A discarded workflow's standing becomes a tombstone carrying the discard's token, so a pass
-- still running cannot write one back; it leaves every index. KEYS as settle.lua's.
-- ARGV: id, the token the discard raised the fence to.
local held = redis.call('HGET', KEYS[1], ARGV[1])
local token = tonumber(ARGV[2])
if held then token = math.max(token, tonumber(string.match(held, '^(%d+)'))) end
redis.call('HSET', KEYS[1], ARGV[1], string.format('%d', token) .. '\n')
for i = 2, 7 do redis.call('ZREM', KEYS[i], ARGV[1]) end
return 1
