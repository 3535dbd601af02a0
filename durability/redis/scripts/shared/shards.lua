-- The count of shards a namespace was made with (see shards.py), written by the first to ask.
-- KEYS[1] = {ns}:shards   KEYS[2..] = keys a queue made before shards would have ({ns}:ready,
-- {ns}:schedule, {ns}:sleeping, {ns}:standings)   ARGV[1] = the count this caller opens it with
-- Returns the count the namespace holds now.
local held = redis.call('GET', KEYS[1])
if held then
  return held
end
for i = 2, #KEYS do
  if redis.call('EXISTS', KEYS[i]) == 1 then
    -- Made before shards were counted: its keys are the one-shard layout.
    redis.call('SET', KEYS[1], '1')
    return '1'
  end
end
redis.call('SET', KEYS[1], ARGV[1])
return ARGV[1]
