-- Make the queue ready to use: its stream and consumer group, and its marker (see marker.py).
-- KEYS[1] = {ns}:ready   KEYS[2] = {ns}:marker   ARGV[1] = group   ARGV[2] = a fresh marker
-- Returns {the marker as it now is, 1 if the group had to be created else 0}.
--
-- The group starts at the stream's beginning, so wakeups appended before it (by an API that
-- submitted while the group was gone) are still delivered. The marker is only ever written
-- when missing: a changed value is how another worker learns that the data set was wiped.
local made = redis.pcall('XGROUP', 'CREATE', KEYS[1], ARGV[1], '0', 'MKSTREAM')
local created = 1
if type(made) == 'table' and made.err then
  if not string.find(made.err, 'BUSYGROUP', 1, true) then
    return made  -- not "it exists already" (a key of another type, say): the caller's error
  end
  created = 0
end
redis.call('SET', KEYS[2], ARGV[2], 'NX')
return {redis.call('GET', KEYS[2]), created}
