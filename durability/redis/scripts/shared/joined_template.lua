-- A checkpoint script, then a scheduler script, as one script: the template `durable.py`
-- composes (after prelude.lua) for a single Redis node, where a script may touch the keys of
-- the workflow and of the queue together. Used for arrive (supply, then the wakeup), deliver
-- (append, then the wakeup) and finish (release, then done).
--
-- One script rather than a pipeline of two: in a pipeline a failing first command does not
-- stop the second, so a write refused by the server would still leave its wakeup behind.
-- Here an error in the first part ends the script before the second part runs.
--
-- KEYS: the workflow's three, then the scheduler's.  ARGV[1] = how many ARGV the checkpoint
-- part takes (n); ARGV[2 .. n+1] are its ARGV, the rest the scheduler part's.
-- Returns the checkpoint part's reply.
local n = tonumber(ARGV[1])
local first_args, then_keys, then_args = {}, {}, {}
for i = 2, n + 1 do first_args[#first_args + 1] = ARGV[i] end
for i = n + 2, #ARGV do then_args[#then_args + 1] = ARGV[i] end
for i = 4, #KEYS do then_keys[#then_keys + 1] = KEYS[i] end

-- Each part sees only its own ARGV (and the scheduler part its own KEYS), as if it ran alone;
-- the prelude's helpers keep reading the workflow's keys from the global KEYS[1..3].
local function first(ARGV)
--[[FIRST]]
end

local function after(KEYS, ARGV)
--[[THEN]]
end

local reply = first(first_args)
after(then_keys, then_args)
return reply
