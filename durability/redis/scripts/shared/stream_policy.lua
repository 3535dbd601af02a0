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

-- The id of the last entry `group` was handed on stream `key`, or false (no stream or group).
local function last_delivered(key, group)
  if redis.call('EXISTS', key) == 0 then return false end
  for _, info in ipairs(redis.call('XINFO', 'GROUPS', key)) do
    local name, last
    for i = 1, #info, 2 do
      if info[i] == 'name' then name = info[i + 1] end
      if info[i] == 'last-delivered-id' then last = info[i + 1] end
    end
    if name == group then return last end
  end
  return false
end

-- Whether entry `id` of stream `key` is still waiting for the group (not yet handed out).
local function undelivered(key, id)
  local last = last_delivered(key, GROUP)
  if not last then return false end
  local lms, lseq = string.match(last, '^(%d+)-(%d+)$')
  local ims, iseq = string.match(id, '^(%d+)-(%d+)$')
  lms, lseq, ims, iseq = tonumber(lms), tonumber(lseq), tonumber(ims), tonumber(iseq)
  return ims > lms or (ims == lms and iseq > lseq)
end

-- The books limit k keeps its counted entries in (holders, or takes in the window).
local function books_of(R, k, per)
  if per > 0 then return R .. ':rate:' .. k end
  return R .. ':held:' .. k
end

-- Entry `old` under `was` is replaced by entry `new` under `becomes` (a merge): a slot held for
-- the old one (a parked wakeup put back) is the new one's. (A merge keeps the limit.)
local function moved_hold(R, was, becomes, old, new)
  local _, k, _, per = policy_of(was)
  if not k then return end
  local books = books_of(R, k, per)
  local score = redis.call('ZSCORE', books, holder(was, old))
  if score then
    redis.call('ZREM', books, holder(was, old))
    redis.call('ZADD', books, score, holder(becomes, new))
  end
end

-- On a shard of a sharded queue (`keep_plain()`, asked by the script's caller) R:plain maps a
-- workflow to its plain wakeup (priority 0, no limit) still waiting there, by entry id, and a
-- second plain wakeup merges into it: a limited wakeup written on another shard withdraws it
-- with one lookup (stream_withdraw.lua), however long the stream in front of it. An index
-- entry is dropped by the done of its delivery, a withdraw, a cancel, or the next wakeup.
local plain_kept = false
local function keep_plain() plain_kept = true end

local function append_plain(R, workflow)
  if not plain_kept then return append(R, workflow, '') end
  local was = redis.call('HGET', R .. ':plain', workflow)
  if was and undelivered(R, was) and #redis.call('XRANGE', R, was, was) > 0 then
    return was  -- one waiting plain wakeup stands for both
  end
  local id = append(R, workflow, '')
  redis.call('HSET', R .. ':plain', workflow, id)
  return id
end

-- A wakeup of `workflow` under `policy`: a new entry, or merged into its waiting one.
local function queue(R, workflow, policy)
  local at, pending = false, ''
  if policy ~= '' or redis.call('EXISTS', R .. ':policy') == 1 then
    at, pending = where_of(redis.call('HGET', R .. ':policy', workflow))
  end
  if not at and policy == '' then
    return append_plain(R, workflow)  -- the common path: one XADD, as before priorities
  end
  local p, k = policy_of(pending)
  local replaced = false
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
    policy, replaced = both, at
  end
  local id
  if policy == '' then id = append_plain(R, workflow) else id = append(R, workflow, policy) end
  if replaced then moved_hold(R, pending, policy, replaced, id) end
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
  if redis.call('HGET', R .. ':plain', workflow) == id then redis.call('HDEL', R .. ':plain', workflow) end
  return true
end

-- A parked wakeup made ready again: appended to its level under the policy it waited with,
-- and the slot that freed for it held for its new entry until `till` (ms: a lease from `now`).
-- A stream cannot put an entry back in its old place, so it re-enters at the back of its level:
-- wakeups without its limit that came meanwhile go first, but a later wakeup of its own limit
-- finds the slot taken and parks behind it (the set puts it back in its old place instead).
local function stream_put_back(R, now, till)
  return function(workflow, _, _)
    local _, policy = where_of(redis.call('HGET', R .. ':policy', workflow))
    redis.call('HDEL', R .. ':policy', workflow)
    local id = queue(R, workflow, policy)
    local _, k, _, per = policy_of(policy)
    if id and k then hold(R, k, per, holder(policy, id), till, now) end
  end
end

-- Let entry `id` (on level stream `key`, read for this group) be taken under its policy's
-- limit: counted, or over the limit parked (off the stream, acknowledged). True if taken.
local function admit(R, key, id, workflow, policy, lease, now)
  local _, k, n, per = policy_of(policy)
  if not k then return true end
  local counted = holder(policy, id)
  if per == 0 and redis.call('ZSCORE', R .. ':held:' .. k, counted) then
    -- Taken over, or put back with the slot that freed for it: its own slot.
    redis.call('ZADD', R .. ':held:' .. k, now + lease, counted)
    return true
  end
  if per > 0 and redis.call('ZSCORE', R .. ':rate:' .. k, counted) then
    -- Put back with a take of the window held for it: the take counts from now, when it is
    -- handed out, not from when it went back (it may have waited since to be read).
    redis.call('ZADD', R .. ':rate:' .. k, now, counted)
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
