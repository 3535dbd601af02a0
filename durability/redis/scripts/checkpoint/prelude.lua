-- Shared head of every checkpointer script (the Python side prepends it to each body).
-- KEYS[1] = <ns>:workflow:{id}        the records: user key -> encoded value, nothing else
-- KEYS[2] = <ns>:workflow:{id}:pass   the claim: token, until, deadline (ms), inbox counter
-- KEYS[3] = <ns>:workflow:{id}:order  a list of "<ms>:<key>", one per first write, in order

-- The server's clock, so every worker agrees on what "now" is whatever its host says.
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)

-- Push each of the workflow's keys that exists to expire no sooner than `ms` from now. Never
-- shortens: a workflow held asleep past its TTL must not be cut short by a later write.
local function rearm(ms)
  for i = 1, 3 do
    local left = redis.call('PTTL', KEYS[i])
    if left == -1 or (left >= 0 and left < ms) then
      redis.call('PEXPIRE', KEYS[i], ms)
    end
  end
end

-- The claim as numbers; an absent claim is token 0, never live.
local function claim_state()
  local c = redis.call('HMGET', KEYS[2], 'token', 'until', 'deadline')
  return tonumber(c[1]) or 0, tonumber(c[2]) or 0, tonumber(c[3]) or 0
end

-- nil if `token` holds a live claim, else why not: -1 a newer claim exists, -2 it lapsed.
local function refused(token)
  local held, live_until, deadline = claim_state()
  if held ~= tonumber(token) then return -1 end
  if now >= live_until or now >= deadline then return -2 end
  return nil
end

-- A sign of life: until = max(until, min(now + alive, deadline)). Never past the budget.
local function stretch(alive)
  local _, live_until, deadline = claim_state()
  local wanted = math.min(now + alive, deadline)
  if wanted > live_until then
    redis.call('HSET', KEYS[2], 'until', wanted)
  end
end

-- First writer wins; a first write also notes its place and time in the order list.
local function write(key, value)
  if redis.call('HSETNX', KEYS[1], key, value) == 1 then
    redis.call('RPUSH', KEYS[3], now .. ':' .. key)
    return true
  end
  return false
end


-- The checkpoint as one JSON array [key, encoded value, written_ms, ...] in first-recorded
-- order (or "{}" when empty: cjson cannot tell an empty array from an empty object). One
-- string rather than a flat reply because the client parses one bulk string far faster than
-- 3n of them; read at one instant with the order list, so the two always agree.
local function dump()
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
end
