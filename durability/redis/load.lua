-- Returns a flat list {key, encoded value, written_ms, ...} in first-recorded order.
-- One script so the order list and the records are read at one instant.
local out = {}
for _, entry in ipairs(redis.call('LRANGE', KEYS[3], 0, -1)) do
  local at, key = string.match(entry, '^(%d+):(.*)$')
  local value = redis.call('HGET', KEYS[1], key)
  if value then
    out[#out + 1] = key
    out[#out + 1] = value
    out[#out + 1] = at
  end
end
return out
