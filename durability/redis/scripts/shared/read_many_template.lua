-- Take up to k ready workflows without claiming them, as one script: the queue's read in a
-- loop, for a worker with k free slots on a Redis Cluster (`RedisDurable.take_up_to`), where
-- each workflow's claim is on a slot of its own and goes after, one per workflow, in one turn.
-- (On a single node `take_many_template.lua` claims them in the same script.)
--
-- KEYS: the scheduler's.  ARGV[1] = k; the rest are the read's ARGV.
-- Returns the read's own reply when the first read found nothing (false, or a table whose first
-- item is false), else {read reply, ...}: one for each workflow taken.
local k = tonumber(ARGV[1])
local read_args = {}
for i = 2, #ARGV do read_args[#read_args + 1] = ARGV[i] end

-- include: many_takes

return up_to(k, read_args, function(taken) return taken end)
