-- A wakeup on the stream as a script body, for `durable.py` to run in the same script as the
-- checkpoint write it announces (the scheduler's own make_ready sends the XADD directly).
-- KEYS[1] = {ns}:ready   ARGV[1] = field name   ARGV[2] = workflow
return redis.call('XADD', KEYS[1], '*', ARGV[1], ARGV[2])
