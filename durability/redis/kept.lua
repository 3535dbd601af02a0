-- Whether a workflow's checkpoint is still there: 1 if its records or its claim hash exist,
-- else 0 (both expired, their ttl, or never written). KEYS: the workflow's three.
if redis.call('EXISTS', KEYS[1], KEYS[2]) > 0 then return 1 end
return 0
