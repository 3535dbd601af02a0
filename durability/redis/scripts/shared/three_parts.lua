-- three_parts.lua: a piece `ended_template.lua` and `settled_template.lua` include, not a
-- script of its own. It splits their KEYS and ARGV into the three parts they run (a checkpoint
-- write, the standing, the queue's done) and declares each part as a function that sees only
-- its own, as if it ran alone; the templates' placeholders are filled after this is included.
-- KEYS: the workflow's three, settle.lua's eight, then the scheduler's. ARGV[1] = how many
-- ARGV the first part takes (n), ARGV[2] = how many settle takes (m); then the first part's
-- n, settle's m, and the rest the done's.
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
