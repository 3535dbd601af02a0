-- ARGV: budget_ms, alive_ms, ttl_ms.
-- Returns {token, deadline_ms, records as dump() encodes them}, or nil if a live claim holds.
-- One script, because check-then-take in two round trips is where a second worker slips in.
-- The records come back in the same reply so a pass starts without a second trip to load them
-- (nobody else can record while the claim holds; what supply/append add later wakes it again).
local held, live_until, deadline = claim_state()
if now < live_until and now < deadline then
  return nil
end
-- A hybrid logical clock: later than any earlier claim even if this key expired and came back.
local token = math.max(now, held + 1)
deadline = now + tonumber(ARGV[1])
live_until = math.min(now + tonumber(ARGV[2]), deadline)
redis.call('HSET', KEYS[2], 'token', token, 'until', live_until, 'deadline', deadline)
rearm(tonumber(ARGV[3]))
return {token, deadline, dump()}
