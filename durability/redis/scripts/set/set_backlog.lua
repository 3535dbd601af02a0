-- The members visible now (score at or below the server's time: ready, not taken) and how
-- long ago the earliest became visible. KEYS[1] = {ns}:schedule.
-- Returns {count, age in ms or false}.
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local ready = redis.call('ZCOUNT', KEYS[1], '-inf', now)
if ready == 0 then return {0, false} end
local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
return {ready, math.max(now - math.floor(tonumber(first[2])), 0)}
