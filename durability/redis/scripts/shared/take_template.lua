-- Take one ready workflow and claim it, as one script: the template `durable.py` composes for
-- a single Redis node, where a script may touch the queue's keys and the workflow's together
-- (the workflow's keys are known only once the queue has named it, so they are built here).
-- Without it a pass starts with two round trips: the read, then the claim.
--
-- KEYS: the scheduler's.  ARGV[1] = how many ARGV the take part takes (n); ARGV[2 .. n+1]
-- are its ARGV; ARGV[n+2] is what the workflow's keys start with (`<ns>:workflow:`); the
-- rest are the claim's (budget_ms, alive_ms, ttl_ms).
-- Returns the take part's own reply when it took nothing (false, or a table whose first item
-- is false), else {{workflow, receipt part}, claim reply or false}.
local n = tonumber(ARGV[1])
local take_args, claim_args = {}, {}
for i = 2, n + 1 do take_args[#take_args + 1] = ARGV[i] end
local prefix = ARGV[n + 2]
for i = n + 3, #ARGV do claim_args[#claim_args + 1] = ARGV[i] end

local function take(KEYS, ARGV)
--[[TAKE]]
end

-- The claim runs after prelude.lua inside this function, so its KEYS are the workflow's.
local function claim(KEYS, ARGV)
--[[CLAIM]]
end

local taken = take(KEYS, take_args)
if not taken or not taken[1] then
  return taken
end
local base = prefix .. '{' .. taken[1] .. '}'
return {taken, claim({base, base .. ':pass', base .. ':order'}, claim_args) or false}
