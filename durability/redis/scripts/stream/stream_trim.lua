-- Trim the stream behind what every consumer group has finished with.
-- KEYS[1] = {ns}:ready   ARGV[1] = 'acked' (the server has XTRIM ... ACKED, 8.2+) or 'minid'
-- Returns how many entries went.
--
-- One script, so no delivery or acknowledgement slips between reading the groups and trimming.
if redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end
local groups = redis.call('XINFO', 'GROUPS', KEYS[1])
-- With no group, nothing was ever delivered: every entry is still owed to a future reader
-- (and XTRIM ... ACKED would treat "no group" as "everything acknowledged").
if #groups == 0 then
  return 0
end
if ARGV[1] == 'acked' then
  return redis.call('XTRIM', KEYS[1], 'MAXLEN', '=', 0, 'ACKED')
end

local function parse(id)
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  return ms, tonumber(seq)
end
local function below(a, b)
  local ams, aseq = parse(a)
  local bms, bseq = parse(b)
  ams, bms = tonumber(ams), tonumber(bms)
  return ams < bms or (ams == bms and aseq < bseq)
end

-- The lowest id that must survive: per group, its oldest pending entry (delivered, not yet
-- acknowledged) and the successor of its last-delivered id (everything after that is unread).
local keep = nil
for _, group in ipairs(groups) do
  local name, last
  for i = 1, #group, 2 do
    if group[i] == 'name' then name = group[i + 1] end
    if group[i] == 'last-delivered-id' then last = group[i + 1] end
  end
  local ms, seq = parse(last)
  local unread = ms .. '-' .. string.format('%d', seq + 1)
  if keep == nil or below(unread, keep) then keep = unread end
  local summary = redis.call('XPENDING', KEYS[1], name)
  if summary[1] > 0 and below(summary[2], keep) then keep = summary[2] end
end
return redis.call('XTRIM', KEYS[1], 'MINID', '=', keep)
