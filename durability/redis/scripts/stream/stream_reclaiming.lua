-- Take over one delivery idle for at least a given time; with none, say when the quietest will
-- have been: what the worker's reclaimer sleeps until, rather than asking again every tick.
-- KEYS[1] = one priority's stream ({ns}:ready, or {ns}:ready:<p>: see stream_policy.lua)
-- ARGV[1] = group   ARGV[2] = consumer   ARGV[3] = min idle ms   ARGV[4] = most pending to read
-- ARGV[5] = {ns}:ready (absent: KEYS[1])   ARGV[6] = lease in ms (absent: ARGV[3])
-- Returns {entry id, workflow, delivery count, policy}, or {false, ms until the quietest
-- pending delivery has been idle that long (false if nothing is pending)}. A limited entry
-- keeps its slot if its holder is still counted, else takes one if there is room, else is
-- parked (see policy.lua) and the look goes on.
--
-- XPENDING ... IDLE lists only deliveries idle that long, so an idle queue costs one lookup
-- whatever its length. The count rises with the claim, so the receipt built from it is dead for
-- the worker that went idle: its late done, wake_at or extend is refused.
-- include: stream_policy
local idle = tonumber(ARGV[3])
local R, lease = ARGV[5] or KEYS[1], tonumber(ARGV[6] or ARGV[3])
while true do
  local lapsed = redis.call('XPENDING', KEYS[1], ARGV[1], 'IDLE', idle, '-', '+', 8)
  if #lapsed == 0 then
    break
  end
  for _, held in ipairs(lapsed) do
    local claimed = redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], idle, held[1])
    local entry = claimed[1]
    if type(entry) == 'table' and type(entry[2]) == 'table' then
      local fields, workflow, policy = entry[2], false, ''
      for i = 1, #fields, 2 do
        if fields[i] == 'workflow' then workflow = fields[i + 1] end
        if fields[i] == 'policy' then policy = fields[i + 1] end
      end
      if workflow then
        local t = redis.call('TIME')
        local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
        if policy == '' or admit(R, KEYS[1], entry[1], workflow, policy, lease, now) then
          local count = redis.call('XPENDING', KEYS[1], ARGV[1], entry[1], entry[1], 1)
          return {entry[1], workflow, count[1][4], policy}
        end
      end
    end
    -- The entry left the stream (cancelled, parked) or names no workflow: nothing to run, so
    -- it goes off the pending list (7.0's XCLAIM drops a deleted one itself; 6.2's keeps it).
    redis.call('XACK', KEYS[1], ARGV[1], held[1])
  end
end
-- Nothing lapsed: the quietest of the first few pending says when the next can. One beyond
-- them can lapse no sooner than `idle` after this look, which is the caller's bound anyway.
local pending = redis.call('XPENDING', KEYS[1], ARGV[1], '-', '+', tonumber(ARGV[4]))
local quietest = -1
for _, held in ipairs(pending) do
  if held[3] > quietest then
    quietest = held[3]
  end
end
if quietest < 0 then
  return {false, false}
end
return {false, math.max(idle - quietest, 0)}
