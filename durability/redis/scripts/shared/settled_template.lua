-- finish with the pass's standing, as one script: the template `durable.py` composes (after
-- prelude.lua) for a single Redis node, like joined_template.lua but with the standing (settle.lua)
-- between the release and the scheduler's done. So a pass ends in one round trip, and no one
-- sees the claim gone and the standing not yet written. (On a cluster the three run apart:
-- the standing first, on the namespace's slot, then the release, then the done.)
--
-- KEYS: the workflow's three, settle.lua's eight (the namespace's standings), then the
-- scheduler's.  ARGV[1] = how many ARGV the release takes (n), ARGV[2] = how many settle takes
-- (m); then the release's n, settle's m, and the rest the done's.
-- Returns {the release's reply, settle's (1 written, 0 refused)}.
-- include: three_parts

-- The standing first, while the claim it is fenced by is still this pass's to end.
local stood = stand(stand_keys, stand_args)
local reply = first(first_args)
after(then_keys, then_args)
return {reply, stood}
