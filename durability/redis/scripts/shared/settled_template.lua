-- finish with the pass's standing, as one script: the template `durable.py` composes (after
-- prelude.lua) for a single Redis node, like joined_template.lua but with the standing (settle.lua)
-- between the release and the scheduler's done. So a pass ends in one round trip, and no one
-- sees the claim gone and the standing not yet written. (On a cluster the three run apart:
-- the standing first, on the namespace's slot, then the release, then the done.)
--
-- KEYS: the workflow's three, settle.lua's eight (the namespace's standings), then the
-- scheduler's.  ARGV[1] = how many ARGV the release takes (n), ARGV[2] = how many settle takes
-- (m); then the release's n, settle's m, and the rest the done's.
-- Returns {the release's reply, settle's (1 written, 0 refused)}.
local n, m = tonumber(ARGV[1]), tonumber(ARGV[2])
local first_args, stand_keys, stand_args, then_keys, then_args = {}, {}, {}, {}, {}
for i = 3, n + 2 do first_args[#first_args + 1] = ARGV[i] end
for i = n + 3, n + m + 2 do stand_args[#stand_args + 1] = ARGV[i] end
for i = n + m + 3, #ARGV do then_args[#then_args + 1] = ARGV[i] end
for i = 4, 11 do stand_keys[#stand_keys + 1] = KEYS[i] end
for i = 12, #KEYS do then_keys[#then_keys + 1] = KEYS[i] end

local function first(ARGV)
--[[FIRST]]
end

local function stand(KEYS, ARGV)
--[[STAND]]
end

local function after(KEYS, ARGV)
--[[THEN]]
end

-- The standing first, while the claim it is fenced by is still this pass's to end.
local stood = stand(stand_keys, stand_args)
local reply = first(first_args)
after(then_keys, then_args)
return {reply, stood}
