-- Returns one JSON array [key, encoded value, written_ms, ...] in first-recorded order (or
-- "{}" when there is nothing: cjson cannot tell an empty array from an empty object).
-- One script so the order list and the records are read at one instant; one string rather
-- than a flat reply because the client parses one bulk string far faster than 3n of them.
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
return cjson.encode(out)
