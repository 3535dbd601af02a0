-- Take up to k ready workflows and claim each, as one script: `take_template.lua` in a loop,
-- for a worker with k free slots (`RedisDurable.take_up_to`) on a single Redis node.
--
-- KEYS: the scheduler's.  ARGV[1] = k; ARGV[2] = how many ARGV the take part takes (n);
-- ARGV[3 .. n+2] are its ARGV; ARGV[n+3] is what the workflow's keys start with; the rest are
-- the claim's (budget_ms, alive_ms, ttl_ms).
-- Returns the take part's own reply when the first take found nothing (false, or a table whose
-- first item is false), else {{{workflow, receipt part}, claim reply or false}, ...}.
local k = tonumber(ARGV[1])
local n = tonumber(ARGV[2])
local take_args, claim_args = {}, {}
for i = 3, n + 2 do take_args[#take_args + 1] = ARGV[i] end
local prefix = ARGV[n + 3]
for i = n + 4, #ARGV do claim_args[#claim_args + 1] = ARGV[i] end

-- include: many_takes

-- The claim runs after prelude.lua inside this function, so its KEYS are the workflow's.
local function claim(KEYS, ARGV)
--[[CLAIM]]
end

return up_to(k, take_args, function(taken)
  local base = prefix .. '{' .. taken[1] .. '}'
  return {taken, claim({base, base .. ':pass', base .. ':order'}, claim_args) or false}
end)
