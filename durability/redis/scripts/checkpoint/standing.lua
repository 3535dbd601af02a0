-- One workflow's standing: the field ARGV[1] of the namespace's standings hash KEYS[1] (nil
-- if it has none). A script, not a bare HGET, so that `look` sends it through the batcher
-- beside looked.lua: on a single node both go in one pipeline, one round trip.
return redis.call('HGET', KEYS[1], ARGV[1])
