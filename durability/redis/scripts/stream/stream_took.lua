-- The entry a blocking read just gave the waiting consumer, handed to the worker's own
-- consumer, as a script body for `durable.py`: it is sent in one pipeline right behind that
-- `XREADGROUP ... BLOCK`, so Redis runs it the moment the read is served, and the claim in
-- the same script goes with it: a woken worker starts its pass without a second round trip.
-- KEYS[1] = {ns}:ready   ARGV[1] = group   ARGV[2] = the worker's consumer
-- ARGV[3] = the waiting consumer   ARGV[4] = the workflow field
-- Returns {workflow, entry id}, or false when the read found nothing.
local pending = redis.call('XPENDING', KEYS[1], ARGV[1], '-', '+', 1, ARGV[3])
if #pending == 0 then
  return false
end
local id = pending[1][1]
-- JUSTID: a hand-over inside one worker is not a new delivery; the count stays 1.
redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, id, 'JUSTID')
local entries = redis.call('XRANGE', KEYS[1], id, id)
if #entries == 0 then
  return false
end
local fields = entries[1][2]
for i = 1, #fields, 2 do
  if fields[i] == ARGV[4] then
    return {fields[i + 1], id}
  end
end
-- An entry without a workflow stays pending, as when the client reads it: `reclaiming` finds it.
return false
