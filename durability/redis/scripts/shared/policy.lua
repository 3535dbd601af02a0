-- policy.lua: a piece the queue scripts include (`-- include: policy`), not a script of its own.
-- A wakeup's priority and limit, and the books a limit keeps, all under the queue's own key S
-- (`{ns}:schedule` or `{ns}:ready`), so every key below is on the queue's slot.
--
-- A policy travels as text: '' for priority 0 and no limit (the common path), else
-- '<priority>\t<limit key>\t<at most>\t<per ms, 0 for a concurrency limit>' (key '' = none).
--   S:policy           HASH  workflow -> the policy of its wakeup (only if not '')
--   S:levels           ZSET  the priorities other than 0 that hold wakeups (the set: members)
--   S:held:<key>       ZSET  a concurrency limit's holders: receipt -> lease end (ms)
--   S:rate:<key>       ZSET  a rate limit's takes: receipt -> taken at (ms)
--   S:parked:<key>     ZSET  wakeups waiting for room: workflow -> priority band + ready ms
--   S:parked           ZSET  limit keys with parked wakeups -> when room may come (ms)
local BAND = 4398046511104  -- 2^42 ms (past the year 2100): one priority's band of ready times
-- The set's flag that its queue has a policy somewhere (set_take.lua), and the stream's
-- sleeper that stands for its parked wakeups (stream_wake_due.lua): braces, so never a workflow.
local IN_USE, PARKED = '{policies}', '{parked}'

local function policy_of(text)
  if not text or text == '' then return 0, false, 0, 0 end
  local p, k, n, per = string.match(text, '^(%-?%d+)\t([^\t]*)\t(%d+)\t(%d+)$')
  if k == '' then k = false end
  return tonumber(p), k, tonumber(n), tonumber(per)
end

-- The policy S:policy keeps for `workflow` ('' if none); the stream's value starts with where
-- its wakeup is (stream_policy.lua), which is left off.
local function kept_policy(S, workflow)
  local text = workflow and redis.call('HGET', S .. ':policy', workflow)
  if not text then return '' end
  local _, tabs = string.gsub(text, '\t', '')
  if tabs == 4 then return string.match(text, '^[^\t]*\t(.*)$') end
  return text
end

local function policy_text(p, k, n, per)
  if p == 0 and not k then return '' end
  return string.format('%d', p) .. '\t' .. (k or '') .. '\t' .. n .. '\t' .. per
end

-- Two wakeups of one workflow as one: the higher priority, and the pending one's limit (or
-- the new one's if the pending one had none).
local function merged(pending, new)
  local p1, k1, n1, r1 = policy_of(pending)
  local p2, k2, n2, r2 = policy_of(new)
  if k1 then return policy_text(math.max(p1, p2), k1, n1, r1) end
  return policy_text(math.max(p1, p2), k2, n2, r2)
end

local function level_key(S, p)
  if p == 0 then return S end  -- priority 0 keeps the key a queue had before priorities
  return S .. ':' .. string.format('%d', p)
end

local function note_level(S, p)
  if p ~= 0 then redis.call('ZADD', S .. ':levels', p, p) end
end

-- Every level to read, highest first, 0 in its place.
local function levels_of(S)
  local out, placed = {}, false
  for _, level in ipairs(redis.call('ZREVRANGE', S .. ':levels', 0, -1)) do
    local p = tonumber(level)
    if p < 0 and not placed then out[#out + 1] = 0; placed = true end
    out[#out + 1] = p
  end
  if not placed then out[#out + 1] = 0 end
  return out
end

-- How many more takes limit k allows now, and when full, when room may come (ms).
local function room(S, k, n, per, now)
  local books = S .. ':held:' .. k
  local gone = now
  if per > 0 then
    books, gone = S .. ':rate:' .. k, now - per
  end
  redis.call('ZREMRANGEBYSCORE', books, '-inf', gone)  -- lapsed leases, takes out of the window
  local used = redis.call('ZCARD', books)
  if used < n then return n - used, false end
  local first = redis.call('ZRANGE', books, 0, 0, 'WITHSCORES')
  if per > 0 then return 0, tonumber(first[2]) + per end
  return 0, tonumber(first[2])
end

-- Count a take against limit k: a holder until its lease ends, or a take in the window.
local function hold(S, k, per, receipt, lease_end, now)
  if per > 0 then
    redis.call('ZADD', S .. ':rate:' .. k, now, receipt)
  else
    redis.call('ZADD', S .. ':held:' .. k, lease_end, receipt)
  end
end

-- A ready wakeup over its limit waits in S:parked:<k>, in priority then readiness order.
local function park(S, k, workflow, p, ready, when)
  redis.call('ZADD', S .. ':parked:' .. k, (100 - p) * BAND + math.floor(ready), workflow)
  redis.call('ZADD', S .. ':parked', 'LT', when, k)
end

-- Put back as many of limit k's parked wakeups as it has room for (`put_back(workflow, p,
-- ready)` makes one ready again); the rest wait until `when` room may come, or `fallback`.
-- A rate window frees by time alone, with no answer to bring the rest back: they wait until
-- the window next has room once the ones put back are taken (about now), and no later.
local function unpark(S, k, n, per, now, put_back, fallback)
  local free, when = room(S, k, n, per, now)
  local parked = S .. ':parked:' .. k
  if free > 0 then
    local popped = redis.call('ZPOPMIN', parked, free)
    for i = 1, #popped, 2 do
      local order = tonumber(popped[i + 1])
      put_back(popped[i], 100 - math.floor(order / BAND), order % BAND)
    end
    if per > 0 then
      -- The oldest take in the window (the stream holds a put-back wakeup's take from when
      -- it goes back until it is taken, then counts it from then; the set counts it when it
      -- is taken) ages out first.
      local first = redis.call('ZRANGE', S .. ':rate:' .. k, 0, 0, 'WITHSCORES')
      when = math.min(first[2] and tonumber(first[2]) or now, now) + per
    end
  end
  if redis.call('EXISTS', parked) == 0 then
    redis.call('ZREM', S .. ':parked', k)
  else
    redis.call('ZADD', S .. ':parked', when or fallback, k)
  end
end

-- Unpark every limit whose room may have come by now; return when the next may (or false).
local function unpark_due(S, now, put_back, fallback)
  for _, k in ipairs(redis.call('ZRANGEBYSCORE', S .. ':parked', '-inf', now, 'LIMIT', 0, 16)) do
    local first = redis.call('ZRANGE', S .. ':parked:' .. k, 0, 0)
    local _, _, n, per = policy_of(kept_policy(S, first[1]))
    if n > 0 then
      unpark(S, k, n, per, now, put_back, fallback)
    else
      redis.call('ZREM', S .. ':parked:' .. k, first[1] or '')  -- cancelled meanwhile
      if redis.call('EXISTS', S .. ':parked:' .. k) == 0 then redis.call('ZREM', S .. ':parked', k) end
    end
  end
  local next = redis.call('ZRANGE', S .. ':parked', 0, 0, 'WITHSCORES')
  return next[2] and tonumber(next[2]) or false
end

-- A holder of limit k is done: its slot frees, and the parked wakeups it makes room for go back.
local function release(S, k, n, per, receipt, now, put_back, fallback)
  if per == 0 then redis.call('ZREM', S .. ':held:' .. k, receipt) end
  if redis.call('EXISTS', S .. ':parked:' .. k) == 1 then
    unpark(S, k, n, per, now, put_back, fallback)
  end
end
