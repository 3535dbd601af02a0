-- The schedules due by ARGV[1] (ms), the earliest first, at most ARGV[2] of them: a range of
-- the index and the records it names, read as one snapshot.
-- KEYS[1] the records (a hash by name), KEYS[2] the index (a sorted set by due, in ms)
local names = redis.call('ZRANGE', KEYS[2], '-inf', ARGV[1], 'BYSCORE', 'LIMIT', 0, ARGV[2])
local found = {}
for _, name in ipairs(names) do
    local record = redis.call('HGET', KEYS[1], name)
    if record then
        found[#found + 1] = name
        found[#found + 1] = record
    end
end
return found
