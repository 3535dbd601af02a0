-- ARGV: token, alive_ms, ttl_ms. Returns {1}, or {-1|-2} if fenced.
-- Only liveness moves; the deadline is what renewal can never lift.
local why = refused(ARGV[1])
if why then return {why} end
stretch(tonumber(ARGV[2]))
rearm(tonumber(ARGV[3]))
return {1}
