-- Read one new entry for this consumer without blocking, as a script body for `durable.py`
-- to run in the same script as the claim of the workflow it names.
-- KEYS[1] = {ns}:ready   ARGV[1] = group   ARGV[2] = consumer   ARGV[3] = the workflow field
-- Returns {workflow, entry id}, or false when nothing new is there.
local reply = redis.call('XREADGROUP', 'GROUP', ARGV[1], ARGV[2], 'COUNT', 1,
  'STREAMS', KEYS[1], '>')
if not reply then
  return false
end
local entry = reply[1][2][1]
local fields = entry[2]
for i = 1, #fields, 2 do
  if fields[i] == ARGV[3] then
    return {fields[i + 1], entry[1]}
  end
end
-- An entry without a workflow stays pending, as when the client reads it: `reclaiming` finds it.
return false
