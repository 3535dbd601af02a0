-- finish with the workflow's ending, as one script: like settled_template.lua, but its first
-- part (end_release.lua) writes the ending and releases only under the pass's token, and the
-- standing and the done follow only if it did (a cancelled pass leaves both to the cancel).
--
-- KEYS: the workflow's three, settle.lua's eight, then the scheduler's. ARGV[1] = how many
-- ARGV the first part takes (n), ARGV[2] = how many settle takes (m); then the first part's
-- n, settle's m, and the rest the done's. Returns {1 ours | 0 refused, settle's reply}.
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

local ours = first(first_args)
if ours ~= 1 then return {0, 0} end
local stood = stand(stand_keys, stand_args)
after(then_keys, then_args)
return {1, stood}
