-- Let an entry a blocking XREADGROUP handed this consumer be taken under its limit (the read
-- itself cannot count a limit): counted, or over the limit parked and acknowledged.
-- KEYS[1] = {ns}:ready   ARGV[1] = the entry's level stream   ARGV[2] = entry id
-- ARGV[3] = workflow   ARGV[4] = policy   ARGV[5] = lease in ms
-- Returns 1 if taken, 0 if parked (the caller reads on).
-- include: stream_policy
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if admit(KEYS[1], ARGV[1], ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[5]), now) then
  return 1
end
return 0
