-- Write the queue's marker if it is missing (see marker.py), and return it as it now is.
-- KEYS[1] = {ns}:marker   ARGV[1] = a fresh marker
-- Only ever written when missing: a changed value is how a worker learns of a wipe.
redis.call('SET', KEYS[1], ARGV[1], 'NX')
return redis.call('GET', KEYS[1])
