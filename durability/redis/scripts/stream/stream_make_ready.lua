-- A wakeup on the stream: the scheduler's make_ready, and a script body for `durable.py` to
-- run in the same script as the checkpoint write it announces.
-- KEYS[1] = {ns}:ready   ARGV[1] = field name   ARGV[2] = workflow
-- ARGV[3] = the wakeup's policy (policy.lua; absent or '': priority 0, no limit)
-- ARGV[4] = '1' on a shard of a sharded queue: a plain wakeup is indexed (stream_policy.lua)
-- Returns the entry id (false if it merged into a wakeup parked for a limit's room).
--
-- With the default policy and no waiting wakeup of this workflow kept with a policy (one
-- EXISTS), one XADD, as before priorities; else see stream_policy.lua's `queue`.
if (ARGV[3] or '') == '' and ARGV[4] ~= '1' and redis.call('EXISTS', KEYS[1] .. ':policy') == 0 then
  -- The common path, before the policy piece's functions are made (they are, every run).
  return redis.call('XADD', KEYS[1], '*', ARGV[1], ARGV[2])
end
-- include: stream_policy
if ARGV[4] == '1' then keep_plain() end
return queue(KEYS[1], ARGV[2], ARGV[3] or '')
