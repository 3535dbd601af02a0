-- stream_policy.lua: a piece the stream's scripts include (`-- include: stream_policy`), not a
-- script of its own: priorities and limits on the stream, on policy.lua's books (R = {ns}:ready).
--
-- A stream per priority in use: R for 0 (the key a queue had before priorities), R:<p> for
-- the others, each with the group `workers`, listed in R:levels (never removed: a held entry
-- of a level is answered on it). An entry carries its policy in a field `policy` (absent: the
-- default). A level made new appends a `nudge` entry to R, so a reader blocked on the levels it
-- knew wakes and looks again. R:policy maps a workflow to '<entry id or parked>\t<policy>',
-- its wakeup still waiting with a policy, so the next make_ready merges into it.
-- include: policy
local GROUP = 'workers'

local function ms_of(id)
  return tonumber(string.match(id, '^(%d+)'))
end

local function where_of(text)
  if not text then return false, '' end
  local at, policy = string.match(text, '^([^\t]*)\t(.*)$')
  return at, policy
end

-- Append a wakeup of `workflow` under `policy` to its level's stream; return the entry id.
local function append(R, workflow, policy)
  local p = policy_of(policy)
  local key = level_key(R, p)
  if p ~= 0 and redis.call('ZADD', R .. ':levels', p, p) == 1 then
    redis.pcall('XGROUP', 'CREATE', key, GROUP, '0', 'MKSTREAM')
    redis.call('XADD', R, '*', 'nudge', p)
  end
  if policy == '' then
    return redis.call('XADD', key, '*', 'workflow', workflow)
  end
  return redis.call('XADD', key, '*', 'workflow', workflow, 'policy', policy)
end

-- What a limit's books count an entry under: ids repeat across the levels' streams.
local function holder(policy, id)
  return string.format('%d', policy_of(policy)) .. '/' .. id
end

-- Whether entry `id` of stream `key` is still waiting for the group (not yet handed out).
local function undelivered(key, id)
  if redis.call('EXISTS', key) == 0 then return false end
  for _, group in ipairs(redis.call('XINFO', 'GROUPS', key)) do
    local name, last
    for i = 1, #group, 2 do
      if group[i] == 'name' then name = group[i + 1] end
      if group[i] == 'last-delivered-id' then last = group[i + 1] end
    end
    if name == GROUP then
      local lms, lseq = string.match(last, '^(%d+)-(%d+)$')
      local ims, iseq = string.match(id, '^(%d+)-(%d+)$')
      lms, lseq, ims, iseq = tonumber(lms), tonumber(lseq), tonumber(ims), tonumber(iseq)
      return ims > lms or (ims == lms and iseq > lseq)
    end
  end
  return false
end

-- A wakeup of `workflow` under `policy`: a new entry, or merged into its waiting one.
local function queue(R, workflow, policy)
  local at, pending = false, ''
  if policy ~= '' or redis.call('EXISTS', R .. ':policy') == 1 then
    at, pending = where_of(redis.call('HGET', R .. ':policy', workflow))
  end
  if not at and policy == '' then
    return append(R, workflow, '')  -- the common path: one XADD, as before priorities
  end
  local p, k = policy_of(pending)
  if at == 'parked' then
    local both = merged(pending, policy)
    local order = tonumber(redis.call('ZSCORE', R .. ':parked:' .. k, workflow))
    if order then
      redis.call('ZADD', R .. ':parked:' .. k, (100 - policy_of(both)) * BAND + order % BAND, workflow)
      redis.call('HSET', R .. ':policy', workflow, 'parked\t' .. both)
      return false
    end
  elseif at and undelivered(level_key(R, p), at) then
    local both = merged(pending, policy)
    if both == pending then return at end
    redis.call('XDEL', level_key(R, p), at)
    policy = both
  end
  local id = append(R, workflow, policy)
  if policy ~= '' then
    redis.call('HSET', R .. ':policy', workflow, id .. '\t' .. policy)
  elseif at then
    redis.call('HDEL', R .. ':policy', workflow)
  end
  return id
end

-- Whether a plain entry `id` of `workflow` (read on stream `key`, for `group`) is void: a
-- wakeup made with a policy after it, while it waited, is still waiting (a later entry, or
-- parked). The plain one's make_ready kept no record (the common path writes only its entry),
-- so that one could not merge into it: they merge here, the later one standing for both, and
-- the void entry is acknowledged and dropped.
local function superseded(R, key, group, id, workflow)
  local at, pending = where_of(redis.call('HGET', R .. ':policy', workflow))
  if not at or at == id then return false end
  if at ~= 'parked' and not undelivered(level_key(R, policy_of(pending)), at) then return false end
  redis.call('XACK', key, group, id)
  redis.call('XDEL', key, id)
  return true
end

-- A parked wakeup made ready again: appended to its level under the policy it waited with.
local function stream_put_back(R)
  return function(workflow, _, _)
    local _, policy = where_of(redis.call('HGET', R .. ':policy', workflow))
    redis.call('HDEL', R .. ':policy', workflow)
    queue(R, workflow, policy)
  end
end

-- Let entry `id` (on level stream `key`, read for this group) be taken under its policy's
-- limit: counted, or over the limit parked (off the stream, acknowledged). True if taken.
local function admit(R, key, id, workflow, policy, lease, now)
  local _, k, n, per = policy_of(policy)
  if not k then return true end
  local counted = holder(policy, id)
  if per == 0 and redis.call('ZSCORE', R .. ':held:' .. k, counted) then
    redis.call('ZADD', R .. ':held:' .. k, now + lease, counted)  -- taken over: its own slot
    return true
  end
  local free, when = room(R, k, n, per, now)
  if free > 0 then
    hold(R, k, per, counted, now + lease, now)
    return true
  end
  redis.call('XACK', key, GROUP, id)
  redis.call('XDEL', key, id)
  park(R, k, workflow, policy_of(policy), ms_of(id), when)
  -- The timer hears of it as of a sleeper (stream_wake_due.lua): its look is unchanged.
  redis.call('ZADD', string.gsub(R, ':ready$', ':sleeping'), 'LT', when, PARKED)
  redis.call('HSET', R .. ':policy', workflow, 'parked\t' .. policy)
  return false
end

-- Every level's stream key, highest priority first.
local function level_keys(R)
  local keys = {}
  for _, p in ipairs(levels_of(R)) do keys[#keys + 1] = level_key(R, p) end
  return keys
end
