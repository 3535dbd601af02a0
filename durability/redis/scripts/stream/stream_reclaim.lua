-- Take over one delivery idle for at least a given time, and report its new delivery count.
-- KEYS[1] = {ns}:ready
-- ARGV[1] = group   ARGV[2] = consumer   ARGV[3] = min idle ms   ARGV[4] = cursor
-- Returns {next cursor} or {next cursor, entry id, workflow, delivery count}.
--
-- The count rises with every claim, so the receipt built from it is dead for the worker that
-- went idle: its late done, wake_at or extend is refused instead of acting on our delivery.
local claimed = redis.call('XAUTOCLAIM', KEYS[1], ARGV[1], ARGV[2], ARGV[3], ARGV[4], 'COUNT', 1)
for _, entry in ipairs(claimed[2]) do
  -- Redis 6.2 lists an entry deleted from the stream as nil; 7.0 drops it from the PEL.
  if type(entry) == 'table' and type(entry[2]) == 'table' then
    local fields = entry[2]
    for i = 1, #fields, 2 do
      if fields[i] == 'workflow' then
        local held = redis.call('XPENDING', KEYS[1], ARGV[1], entry[1], entry[1], 1)
        return {claimed[1], entry[1], fields[i + 1], held[1][4]}
      end
    end
  end
end
return {claimed[1]}
