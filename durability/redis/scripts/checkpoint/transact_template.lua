-- ARGV: token, alive_ms, ttl_ms, key, then the effect's own ARGV.
-- KEYS: the workflow's three, then the effect's own KEYS.
-- Returns {1, encoded result} if the effect ran, {0, held} if the key was already recorded,
-- {-1|-2} if fenced (and then the effect did not run).
local why = refused(ARGV[1])
if why then return {why} end
local held = redis.call('HGET', KEYS[1], ARGV[4])
if held then
  -- Still a sign of life, as a record of a recorded key is (and as on every other store): a
  -- transact retried after a lost reply lands here, and a pass left unrenewed by it is
  -- fenced at its next write with no one else in.
  stretch(tonumber(ARGV[2]))
  rearm(tonumber(ARGV[3]))
  return {0, held}
end

-- The effect sees only its own slice of KEYS and ARGV, as if it were a script of its own.
local function effect(KEYS, ARGV)
--[[EFFECT]]
end

local own_keys, own_args = {}, {}
for i = 4, #KEYS do own_keys[#own_keys + 1] = KEYS[i] end
for i = 5, #ARGV do own_args[#own_args + 1] = ARGV[i] end
local encoded = cjson.encode(effect(own_keys, own_args))
stretch(tonumber(ARGV[2]))
write(ARGV[4], encoded)
rearm(tonumber(ARGV[3]))
return {1, encoded}
