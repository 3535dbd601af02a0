-- Remove every wakeup of one workflow: its stream entries and its sleeper.
-- KEYS[1] = {ns}:ready   KEYS[2] = {ns}:sleeping   ARGV[1] = group   ARGV[2] = workflow
-- ARGV[3] = lease in ms (for the slots that go back; absent: 0)
-- Returns how many wakeups went: entries not yet acknowledged (queued or held) plus the sleeper.
--
-- A stream is addressed by entry id, not by content, so this reads the whole stream; trimming
-- is what keeps that short. One script, so no entry is appended behind the scan unseen.
-- Every priority's stream is scanned, and a wakeup parked for a limit's room goes too.
-- include: stream_policy
local function parse_id(id)
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  return tonumber(ms), tonumber(seq)
end
local function after(a, b)
  local ams, aseq = parse_id(a)
  local bms, bseq = parse_id(b)
  return ams > bms or (ams == bms and aseq > bseq)
end

local lease = tonumber(ARGV[3] or '0')
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function cancel_in(key)
local gone = 0
if redis.call('EXISTS', key) == 1 then
  local delivered = last_delivered(key, ARGV[1]) or nil

  local found, limited = {}, {}
  local start = '-'
  while true do
    local batch = redis.call('XRANGE', key, start, '+', 'COUNT', 512)
    for _, entry in ipairs(batch) do
      local fields = entry[2]
      for i = 1, #fields, 2 do
        if fields[i] == 'workflow' and fields[i + 1] == ARGV[2] then
          found[#found + 1] = entry[1]
          for j = 1, #fields, 2 do
            if fields[j] == 'policy' then limited[entry[1]] = fields[j + 1] end
          end
        end
      end
    end
    if #batch < 512 then break end
    start = '(' .. batch[#batch][1]
  end

  for _, id in ipairs(found) do
    if delivered == nil or after(id, delivered) then
      gone = gone + 1  -- never handed to a worker
      local policy = limited[id]
      local _, k, n, per = policy_of(policy)
      -- A parked wakeup put back holds the slot that freed for it: that slot goes back now.
      if k and redis.call('ZREM', books_of(KEYS[1], k, per), holder(policy, id)) == 1 then
        local now = now_ms()
        release(KEYS[1], k, n, per, holder(policy, id), now,
          stream_put_back(KEYS[1], now, now + lease), now + lease)
      end
    elseif #redis.call('XPENDING', key, ARGV[1], id, id, 1) > 0 then
      gone = gone + 1  -- held by a worker: acknowledged here so its wake_at declines
      redis.call('XACK', key, ARGV[1], id)
      local policy = limited[id]
      local _, k, n, per = policy_of(policy)
      if k then
        -- Its pass can no longer answer for it (its done is refused): the slot goes back now.
        local now = now_ms()
        release(KEYS[1], k, n, per, holder(policy, id), now,
          stream_put_back(KEYS[1], now, now + lease), now + lease)
      end
    end
    redis.call('XDEL', key, id)
  end
end
return gone
end

local R, gone = KEYS[1], 0
-- Its parked wakeup first: a slot the scan below gives back must not put it back.
if redis.call('EXISTS', R .. ':policy') == 1 then
  local _, policy = where_of(redis.call('HGET', R .. ':policy', ARGV[2]))
  local _, k = policy_of(policy)
  if k then gone = gone + redis.call('ZREM', R .. ':parked:' .. k, ARGV[2]) end
  redis.call('HDEL', R .. ':policy', ARGV[2])
end
for _, key in ipairs(level_keys(R)) do gone = gone + cancel_in(key) end
redis.call('HDEL', KEYS[2] .. ':policy', ARGV[2])
redis.call('HDEL', R .. ':plain', ARGV[2])
return gone + redis.call('ZREM', KEYS[2], ARGV[2])