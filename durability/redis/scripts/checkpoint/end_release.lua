-- A pass's ending and its release. ARGV: token, ttl_ms, key, encoded value, channel.
-- Only under the pass's token (a cancel's fence or a newer claim raised it otherwise: then
-- nothing is written and 0 returned); the ending first-writer-wins, whoever waits for it told
-- on `channel`, and the claim ended. Returns 1 if the token was the pass's.
local held = claim_state()
if held ~= tonumber(ARGV[1]) then return 0 end
if write(ARGV[3], ARGV[4]) then redis.call('PUBLISH', ARGV[5], '1') end
redis.call('HSET', KEYS[2], 'until', 0)
rearm(tonumber(ARGV[2]))
return 1
