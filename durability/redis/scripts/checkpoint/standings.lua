-- One page of a listing: up to ARGV[3] ids from the index KEYS[2] (all, or one state's) in
-- lexical (byte, so code point) order within [ARGV[1], ARGV[2]), with each one's standing from
-- KEYS[1]. ARGV[1] and ARGV[2] are ZRANGEBYLEX bounds ('[a', '(b', '-', '+').
-- Returns {id, standing, id, standing, ...}.
local ids = redis.call('ZRANGEBYLEX', KEYS[2], ARGV[1], ARGV[2], 'LIMIT', 0, tonumber(ARGV[3]))
local out = {}
for _, id in ipairs(ids) do
  out[#out + 1] = id
  out[#out + 1] = redis.call('HGET', KEYS[1], id) or ''
end
return out
