-- ARGV: token, ttl_ms. Ends the claim if it is still this token's; otherwise a no-op.
local held = claim_state()
if held == tonumber(ARGV[1]) then
  redis.call('HSET', KEYS[2], 'until', 0)
end
rearm(tonumber(ARGV[2]))
return 1
