-- Move one workflow's keys from their names before namespaces to their names under one.
-- KEYS[1..3] = workflow:{id}, workflow:{id}:pass, workflow:{id}:order (the old names)
-- KEYS[4..6] = the same three under <ns>: (one slot with the old: the tag is still {id})
-- Returns 1 if it moved the workflow, 0 if none of the old keys is there, -1 if the new names
-- are already taken (it then moves nothing: the two could not be merged without a choice).
-- One script, so the workflow is never half moved; RENAME keeps each key's expiry.
local present = 0
for i = 1, 3 do present = present + redis.call('EXISTS', KEYS[i]) end
if present == 0 then
  return 0
end
for i = 4, 6 do
  if redis.call('EXISTS', KEYS[i]) == 1 then
    return -1
  end
end
for i = 1, 3 do
  if redis.call('EXISTS', KEYS[i]) == 1 then
    redis.call('RENAME', KEYS[i], KEYS[i + 3])
  end
end
return 1
