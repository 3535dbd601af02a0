-- A concurrency hold given back on the sorted set (done, cancel, wake_at): the parked wakeups
-- that now fit go back to their priority's set. Needs policy.lua before it.
-- Returns true if any went back (the caller then rings the doorbell, as an arrival does).
local function set_release(S, k, n, per, receipt, now, lease_ms)
  local back = false
  local function ready_again(parked, level, ready)
    redis.call('ZADD', level_key(S, level), ready, parked)
    note_level(S, level)
    back = true
  end
  release(S, k, n, per, receipt, now, ready_again, now + lease_ms)
  return back
end

-- Wake a reader waiting on the doorbell (`bell`, absent: none).
local function ring(bell)
  if bell then
    redis.call('LPUSH', bell, 1)
    redis.call('LTRIM', bell, 0, 63)
  end
end
