-- How many ids each state's index holds within [ARGV[1], ARGV[2]) (ZLEXCOUNT bounds: '-' and
-- '+' for every id): a count of the index, no standing read. KEYS = the state indexes, in the
-- order the caller names the states. Returns one count per key.
local out = {}
for i, index in ipairs(KEYS) do
  out[i] = redis.call('ZLEXCOUNT', index, ARGV[1], ARGV[2])
end
return out
