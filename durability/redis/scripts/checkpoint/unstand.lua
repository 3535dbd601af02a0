-- A discarded workflow's standing becomes a tombstone carrying the discard's token, so a pass
-- still running cannot write one back; it leaves every index. KEYS as settle.lua's.
-- ARGV: id, the token the discard raised the fence to.
-- The tombstone is "<token>\n\n<ms>": no state, and the time a sweep judges its age by.
local held = redis.call('HGET', KEYS[1], ARGV[1])
local token = tonumber(ARGV[2])
if held then token = math.max(token, tonumber(string.match(held, '^(%d+)'))) end
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
redis.call('HSET', KEYS[1], ARGV[1], string.format('%d', token) .. '\n\n' .. now)
for i = 2, #KEYS do redis.call('ZREM', KEYS[i], ARGV[1]) end
return 1
