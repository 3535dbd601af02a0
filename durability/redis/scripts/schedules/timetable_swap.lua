-- A schedule's compare-and-set (durability.schedules): the record of ARGV[1] is replaced only
-- if it is still the one the caller read, so two workers that read one record cannot both
-- advance it. One script, because a read then a write in two round trips is where a second
-- worker slips in between.
-- KEYS[1] the records (a hash by name), KEYS[2] the index (a sorted set by due, in ms)
-- ARGV: name, had ('1': the caller read ARGV[3]; '0': it read none), old, keep ('1': write
-- ARGV[5]; '0': remove it), new, due ('' for never, else ms)
local current = redis.call('HGET', KEYS[1], ARGV[1])
if ARGV[2] == '1' then
    if current ~= ARGV[3] then return 0 end
elseif current then
    return 0
end
if ARGV[4] == '0' then
    redis.call('HDEL', KEYS[1], ARGV[1])
    redis.call('ZREM', KEYS[2], ARGV[1])
    return 1
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[5])
if ARGV[6] == '' then
    redis.call('ZREM', KEYS[2], ARGV[1])
else
    redis.call('ZADD', KEYS[2], ARGV[6], ARGV[1])
end
return 1
