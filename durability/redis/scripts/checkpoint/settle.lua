-- Where a pass left its workflow, for status and listings. Every key is the namespace's
-- (tag {<ns>}), so this runs on one slot, cluster or not; the workflow's own keys are on
-- another, so the fence here is the token the standing was written with: a standing written
-- under a newer claim, or a discard's tombstone, is never overwritten by an older pass.
-- KEYS[1] = {<ns>}:standings       HASH  id -> "<token>\n<state>\n<ms>\n<detail JSON>"
-- KEYS[2] = {<ns>}:state:all       ZSET  every id with a standing (score 0: ordered by id)
-- KEYS[3..8] = {<ns>}:state:<s>    ZSET  the ids in state s, for s in queued, sleeping,
--                                         blocked, failed, completed, cancelled
-- ARGV: id, token, index of the state in KEYS (3..8), state, detail JSON.
-- Returns 1 if written, 0 if a newer standing (or a tombstone) holds the id.
--
-- The indexes move only when the state does: the standing held says which one index has the
-- id (this script and unstand.lua are the only writers of both, each atomic), so a pass that
-- ends as its workflow stood costs an HSET alone.
local held = redis.call('HGET', KEYS[1], ARGV[1])
local was = nil  -- the state held ('' for a tombstone), or nil for no standing
if held then
  local token, state = string.match(held, '^(%d+)\n([^\n]*)')
  if tonumber(token) > tonumber(ARGV[2]) then return 0 end
  was = state
end
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2] .. '\n' .. ARGV[4] .. '\n' .. now .. '\n' .. ARGV[5])
if was == ARGV[4] then return 1 end
if was == nil or was == '' then
  redis.call('ZADD', KEYS[2], 0, ARGV[1])
else
  for i = 3, #KEYS do
    -- KEYS[i] ends ':state:<s>'; the held state names the one to leave.
    if string.sub(KEYS[i], -#was - 1) == ':' .. was then redis.call('ZREM', KEYS[i], ARGV[1]) end
  end
end
redis.call('ZADD', KEYS[tonumber(ARGV[3])], 0, ARGV[1])
return 1
