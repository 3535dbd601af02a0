-- The standing and then the done, as one script: how a pass ends on a Redis Cluster once its
-- ending is written and its claim released (`end_release.lua`, on the workflow's own slot).
-- The standings and the queue carry the same hash tag (the namespace's, or the workflow's
-- shard's), so both run on one slot, in one round trip, the standing first as on one node
-- (`ended_template.lua`), and a done never lands without its standing.
--
-- KEYS: settle.lua's (ARGV[1] of them), then the scheduler's.  ARGV[2] = how many ARGV settle
-- takes (m); then settle's m, and the rest the done's.  Returns settle's reply (1 written, 0
-- refused: a newer standing holds the id).
local s, m = tonumber(ARGV[1]), tonumber(ARGV[2])
local stand_keys, stand_args, then_keys, then_args = {}, {}, {}, {}
for i = 1, s do stand_keys[#stand_keys + 1] = KEYS[i] end
for i = s + 1, #KEYS do then_keys[#then_keys + 1] = KEYS[i] end
for i = 3, m + 2 do stand_args[#stand_args + 1] = ARGV[i] end
for i = m + 3, #ARGV do then_args[#then_args + 1] = ARGV[i] end

local function stand(KEYS, ARGV)
--[[STAND]]
end

local function after(KEYS, ARGV)
--[[THEN]]
end

local stood = stand(stand_keys, stand_args)
after(then_keys, then_args)
return stood
